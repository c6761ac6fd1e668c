"""A worker's database session: one connection that LISTENs and holds the worker's advisory lock.

The lock is how the rest of the cluster knows the worker is alive: Postgres drops it the
instant the connection closes, so a dead process frees its job without waiting for a lease.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from typing import TypeVar

import psycopg
from psycopg import sql

from . import db, queries
from .backoff import Backoff
from .jobstore import WORKER_LOCK_NAMESPACE

log = logging.getLogger(__name__)
T = TypeVar("T")


class SessionClosed(Exception):
    """The worker is stopping; the operation was abandoned while reconnecting."""


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
        self.sleep_fn = sleep_fn
        self.lock_key: int | None = None
        # Called as on_rekey(conn, new_key) when the session had to change lock keys.
        self.on_rekey: Callable[[db.Conn, int], None] | None = None
        self._conn: db.Conn | None = None

    @property
    def conn(self) -> db.Conn:
        if self._conn is None or self._conn.closed:
            self._connect_until_ready()
        assert self._conn is not None
        return self._conn

    def _open_once(self) -> db.Conn:
        conn = db.connect(autocommit=True, url=self.url)
        try:
            if self.lock_key is None or not self._try_lock(conn, self.lock_key):
                # First connect, or our old backend outlived its client (a half-open connection)
                # and still holds the old key: carry on under a fresh one.
                old, self.lock_key = self.lock_key, self._fresh_lock(conn)
                if old is not None:
                    log.warning("session lock %s is still held by our previous backend; now using %s", old, self.lock_key)
                    if self.on_rekey is not None:
                        self.on_rekey(conn, self.lock_key)
            conn.execute(sql.SQL("LISTEN {}").format(sql.Identifier(self.channel)))
            return conn
        except BaseException:
            conn.close()
            raise

    @staticmethod
    def _try_lock(conn: db.Conn, key: int) -> bool:
        row = conn.execute(queries.query("acquire_session_lock"), {"lock_namespace": WORKER_LOCK_NAMESPACE, "lock_key": key}).fetchone()
        return bool(row and row["acquired"])

    def _fresh_lock(self, conn: db.Conn) -> int:
        for _ in range(10):
            key = int(conn.execute(queries.query("next_worker_lock_key")).fetchone()["lock_key"])  # type: ignore[index]
            if self._try_lock(conn, key):
                return key
        raise psycopg.OperationalError("could not take a free worker session lock in 10 tries")

    def _connect_until_ready(self) -> None:
        self.close()
        while True:
            if self.stop_event.is_set():
                raise SessionClosed("worker stopping")
            try:
                self._conn = self._open_once()
                if self.backoff.attempt:
                    log.warning("database session restored (lock %s) after %d tries", self.lock_key, self.backoff.attempt)
                self.backoff.reset()
                return
            except psycopg.OperationalError as exc:
                delay = self.backoff.next_delay()
                log.warning("database unavailable (%s); retrying in %.2fs", str(exc).strip().splitlines()[0], delay)
                self.sleep_fn(delay)

    def run(self, fn: Callable[[db.Conn], T]) -> T:
        """Run `fn(conn)`, reconnecting and retrying when the connection is lost."""
        while True:
            conn = self.conn
            try:
                return fn(conn)
            except psycopg.OperationalError as exc:
                log.warning("lost database session: %s", str(exc).strip().splitlines()[0] if str(exc).strip() else exc)
                self.close()

    def wait(self, timeout: float, payload: str, *, slice_seconds: float = 0.1) -> bool:
        """Block up to `timeout` for a NOTIFY with `payload`; False on timeout or when stopping.

        Waits in short slices so a stop request is honoured promptly even when idle.
        """
        deadline = time.monotonic() + timeout

        def _wait(conn: db.Conn) -> bool:
            while not self.stop_event.is_set():
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    return False
                for notice in conn.notifies(timeout=min(slice_seconds, remaining)):
                    if notice.payload == payload:
                        return True
            return False

        return self.run(_wait)

    def close(self) -> None:
        conn, self._conn = self._conn, None
        if conn is not None and not conn.closed:
            try:
                conn.close()
            except psycopg.Error:
                pass
