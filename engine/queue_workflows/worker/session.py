"""A worker's database session: the connection it claims on, LISTENs on, and holds its lock with.

The worker's lock key is taken once from a sequence and held *shared*, here and on the
liveness beat's connection: the rest of the cluster counts the worker alive while either
connection holds it, so the loss of one connection is survivable but the process's death is
seen at once. See docs/liveness.md.
"""

from __future__ import annotations

import logging
import select
import threading
import time
from collections.abc import Callable
from typing import TypeVar

import psycopg
from psycopg import sql

from queue_workflows import db
from queue_workflows.common import sqlfile
from queue_workflows.common.backoff import Backoff
from queue_workflows.common.text import first_line
from queue_workflows.common.wake import WakeEvent
from queue_workflows.common.wake import notifies as wake_notifies
from queue_workflows.jobstore import WORKER_LOCK_NAMESPACE

_WORKER = sqlfile.load("queue_workflows.worker", "worker.sql")

log = logging.getLogger(__name__)
T = TypeVar("T")


class SessionClosed(Exception):
    """The worker is stopping; the operation was abandoned while reconnecting."""


def hold_worker_lock(conn: db.Conn, key: int) -> None:
    """Take the worker's lock (shared) on `conn`; it lasts as long as that connection."""
    row = conn.execute(_WORKER.sql("acquire_session_lock"), {"lock_namespace": WORKER_LOCK_NAMESPACE, "lock_key": key}).fetchone()
    if not (row and row["acquired"]):
        raise psycopg.OperationalError(f"worker lock {key} is held exclusively by another session")


FRESH_KEY_TRIES = 100
"""Keys a worker draws at start before giving up: each one refused is held by some other session."""


def take_fresh_worker_lock(conn: db.Conn) -> int:
    """Draw keys from the sequence until one no other session holds, and hold it (shared) on `conn`."""
    for _ in range(FRESH_KEY_TRIES):
        key = int(conn.execute(_WORKER.sql("next_worker_lock_key")).fetchone()["lock_key"])  # type: ignore[index]
        row = conn.execute(_WORKER.sql("acquire_fresh_session_lock"), {"lock_namespace": WORKER_LOCK_NAMESPACE, "lock_key": key}).fetchone()
        if row and row["acquired"]:
            return key
        log.warning("worker lock %s is already held by another session; drawing the next key", key)
    raise psycopg.OperationalError(f"{FRESH_KEY_TRIES} worker lock keys in a row were already held by other sessions")


def readable(conn: db.Conn) -> bool:
    """True when the server sent something unasked: a notification, or the news that it closed us."""
    try:
        return bool(select.select([conn.fileno()], [], [], 0)[0])
    except (OSError, ValueError, psycopg.Error):
        return True


class WorkerSession:
    def __init__(
        self,
        channel: str,
        *,
        url: str,
        stop_event: threading.Event,
        backoff: Backoff | None = None,
        sleep_fn: Callable[[float], None] = time.sleep,
    ) -> None:
        self.channel = channel
        self.url = url
        self.stop_event = stop_event
        self.backoff = backoff or Backoff()
        self.disk_full_backoff = Backoff(initial=0.25, maximum=5.0)
        self.sleep_fn = sleep_fn
        self.lock_key: int | None = None
        self._conn: db.Conn | None = None
        self._open = True
        # Held by whoever is using the connection, so the liveness beat repairs it only when idle.
        self._use = threading.RLock()

    @property
    def conn(self) -> db.Conn:
        with self._use:
            if self._conn is None or self._conn.closed:
                self._connect_until_ready()
            assert self._conn is not None
            return self._conn

    def current_connection(self) -> db.Conn | None:
        """The open connection, if any, without connecting (for watching its socket)."""
        return self._conn

    def _open_once(self) -> db.Conn:
        conn = db.connect(autocommit=True, url=self.url)
        try:
            if self.lock_key is None:
                self.lock_key = take_fresh_worker_lock(conn)
            else:
                hold_worker_lock(conn, self.lock_key)
            conn.execute(sql.SQL("LISTEN {}").format(sql.Identifier(self.channel)))
            return conn
        except BaseException:
            conn.close()
            raise

    def _connect_until_ready(self) -> None:
        self._discard()
        while True:
            if self.stop_event.is_set() or not self._open:
                raise SessionClosed("worker stopping")
            try:
                self._conn = self._open_once()
                if self.backoff.attempt:
                    log.warning("database session restored (lock %s) after %d tries", self.lock_key, self.backoff.attempt)
                self.backoff.reset()
                return
            except psycopg.OperationalError as exc:
                delay = self.backoff.next_delay()
                log.warning("database unavailable (%s); retrying in %.2fs", first_line(exc), delay)
                self.sleep_fn(delay)

    def run(self, fn: Callable[[db.Conn], T]) -> T:
        """Run `fn(conn)`, reconnecting and retrying when the connection is lost."""
        with self._use:
            while True:
                conn = self.conn
                try:
                    result = fn(conn)
                    self.disk_full_backoff.reset()
                    return result
                except psycopg.errors.DiskFull as exc:  # the session is fine; what it must write has nowhere to go
                    delay = self.disk_full_backoff.next_delay()
                    log.warning("Postgres is out of disk space (%s); trying again in %.2fs", first_line(exc), delay)
                    self._discard()  # a clean session for the retry, whatever state the failed statement left
                    if self.stop_event.wait(delay):
                        raise SessionClosed("worker stopping") from None
                except psycopg.OperationalError as exc:
                    log.warning("lost database session: %s", first_line(exc))
                    self._discard()

    def repair_if_idle(self) -> bool:
        """Reopen a connection the server dropped while nobody was using it (one try); True if repaired.

        Called from the liveness beat, so a running job's worker gets its second lock holder back
        without waiting for the job to return.
        """
        if not self._use.acquire(blocking=False):
            return False
        try:
            conn = self._conn
            if not self._open or self.lock_key is None:
                return False  # closed for good, or never opened: nothing to restore
            if conn is not None and not conn.closed and readable(conn):
                try:
                    conn.execute("SELECT 1")  # notifications go to psycopg's backlog, not lost
                except psycopg.OperationalError as exc:
                    log.warning("session connection lost while idle (%s); reopening", first_line(exc))
                    self._discard()
            if self._conn is not None and not self._conn.closed:
                return False
            self._conn = self._open_once()
            log.warning("session connection restored in the background (lock %s)", self.lock_key)
            return True
        finally:
            self._use.release()

    def wait(self, timeout: float, payload: str, *, slice_seconds: float = 0.1, wake: threading.Event | None = None) -> bool:
        """Block up to `timeout` for a NOTIFY with `payload` (or `wake` being set); False on timeout or stop.

        Blocks in the socket; a stop or `wake` that is a WakeEvent ends the wait at once, a plain
        Event within `slice_seconds`.
        """
        deadline = time.monotonic() + timeout
        watched = [self.stop_event, wake]
        slice_seconds = timeout if all(isinstance(e, WakeEvent) for e in watched if e is not None) else slice_seconds

        def _wait(conn: db.Conn) -> bool:
            while not self.stop_event.is_set():
                if wake is not None and wake.is_set():
                    wake.clear()
                    return True
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    return False
                for notice in wake_notifies(conn, min(slice_seconds, remaining), wake=watched):
                    if notice.payload == payload:
                        return True
            return False

        return self.run(_wait)

    def _discard(self) -> None:
        conn, self._conn = self._conn, None
        if conn is not None and not conn.closed:
            try:
                conn.close()
            except psycopg.Error:
                pass

    def close(self) -> None:
        """Close for good: the worker is stopping and nothing may reopen the connection."""
        with self._use:
            self._open = False
            self._discard()
