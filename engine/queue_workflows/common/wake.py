"""Waiting without polling: an Event that select() can watch, and LISTEN waits that block in the socket.

psycopg's own `notifies(timeout=...)` wakes every 0.1 s while it waits (its interrupt check);
an idle process that waits in select() on the connection and on these events wakes only when
something arrives.
"""

from __future__ import annotations

import contextlib
import os
import select
import threading
import time
from collections.abc import Iterable, Sequence

import psycopg

from queue_workflows import db


class WakeEvent(threading.Event):
    """A threading.Event whose `fileno()` turns readable when it is set, so a select() hears it."""

    def __init__(self) -> None:
        super().__init__()
        self._r, self._w = os.pipe()
        os.set_blocking(self._r, False)
        os.set_blocking(self._w, False)

    def fileno(self) -> int:
        return self._r

    def set(self) -> None:
        super().set()
        try:
            if self._w >= 0:
                os.write(self._w, b"!")
        except OSError:
            pass  # the pipe is full: it is readable already

    def clear(self) -> None:
        # Drained first: a set() racing this clear() leaves at worst a spurious wake, never a lost one.
        try:
            while os.read(self._r, 4096):
                pass
        except OSError:
            pass
        super().clear()

    def close(self) -> None:
        """Close its pipe now rather than when it is collected; a set() afterwards only sets the flag."""
        fds = (getattr(self, "_r", -1), getattr(self, "_w", -1))
        self._r = self._w = -1  # a closed number may be reused: never read or write it again
        for fd in fds:
            if fd >= 0:
                with contextlib.suppress(OSError):
                    os.close(fd)

    def __del__(self) -> None:
        self.close()


def wait_any(events: Sequence[threading.Event], timeout: float) -> None:
    """Until one of `events` is set or `timeout` passes: in select() when all are WakeEvents, else in 0.2 s slices."""
    deadline = time.monotonic() + timeout
    while not any(e.is_set() for e in events):
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            return
        fds = wake_fds(events)
        if len(fds) == len(events):
            select.select(fds, [], [], remaining)
        else:
            events[0].wait(min(remaining, 0.2))


def wake_fds(events: Iterable[threading.Event | None]) -> list[int]:
    return [e.fileno() for e in events if isinstance(e, WakeEvent)]


def notifies(conn: db.Conn, timeout: float, *, wake: Iterable[threading.Event | None] = ()) -> list[psycopg.Notify]:
    """What arrived on `conn` (the backlog at once), else whatever comes within `timeout`; [] when a
    `wake` event fires or the time runs out. A closed connection raises, as psycopg would."""
    found = list(conn.notifies(timeout=0))
    deadline = time.monotonic() + timeout
    fds = wake_fds(wake)
    while not found:
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            break
        try:
            ready = select.select([conn.fileno(), *fds], [], [], remaining)[0]
        except (OSError, ValueError) as exc:
            raise psycopg.OperationalError(f"connection unusable: {exc}") from None
        if conn.fileno() in ready:
            found = list(conn.notifies(timeout=0))
        if any(fd in ready for fd in fds):
            break
    return found
