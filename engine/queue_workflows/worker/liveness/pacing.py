"""When the liveness beat ticks: every `check_seconds` around jobs, else only at its next chore.

An idle worker's beat has nothing to check between its heartbeats, control polls and memory
checks: whatever it must hear sooner wakes it (a NOTIFY or a dropped connection makes its socket
readable, a starting job pokes it), so it sleeps until the next chore instead of every quarter second.
"""

from __future__ import annotations

import select
import threading
from collections.abc import Iterable

import psycopg

from queue_workflows import db
from queue_workflows.common.wake import WakeEvent

IDLE_AFTER_SECONDS = 2.0  # no job this long: the beat sleeps until its next chore


class BeatPacer:
    def __init__(self, check_seconds: float, halt: threading.Event) -> None:
        self.check_seconds = check_seconds
        self.halt = halt
        self.busy_at = float("-inf")  # when a tick last saw a job: a worker between jobs keeps its short beat
        self.long_sleep = False  # the beat sets it before it looks for a job; `due` clears it for a short sleep
        self._poked = WakeEvent()
        self.sleeps = 0  # the beat's waits so far: they follow its clock and its wake-ups, not the jobs' pace

    def due(self, now: float, chores: float, job_due: float | None) -> float:
        """The next tick: `chores` (the next scheduled one) or sooner while a job runs or just ran."""
        if job_due is not None:
            self.busy_at = now
        if now - self.busy_at < IDLE_AFTER_SECONDS:
            self.long_sleep = False
            chores = min(chores, now + self.check_seconds)
        return chores if job_due is None else min(chores, job_due)

    def job_started(self) -> None:
        if self.long_sleep:
            self.poke()

    def sleep(self, timeout: float, conns: Iterable[db.Conn | None]) -> None:
        """Sleep until `timeout`, a poke, or the server writes to one of `conns`."""
        self.sleeps += 1
        fds = [self._poked.fileno()]
        for conn in conns:
            if conn is not None and not conn.closed:
                try:
                    fds.append(conn.fileno())
                except psycopg.Error:
                    pass
        try:
            ready, _, _ = select.select(fds, [], [], timeout)
        except (OSError, ValueError):
            self.halt.wait(min(timeout, 0.05))
            return
        if ready:
            self._poked.clear()

    def poke(self) -> None:
        self._poked.set()

    def close(self) -> None:
        self._poked.close()
