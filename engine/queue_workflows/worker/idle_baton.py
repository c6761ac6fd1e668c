"""The idle baton: one idle worker per queue listens; the rest wait in line behind a lock.

Without it every idle worker of a queue wakes on each enqueue and all but one claim nothing, so
futile claims per job grow with the workers. With it, of a queue's idle workers only the holder
of a session advisory lock (namespace `BATON_NAMESPACE`, key `hashtext(queue)`) acts on NOTIFY;
the others block on that lock. The holder hands the baton on the moment it claims a job, and the
next in line (woken by the lock, not by a NOTIFY) drains once before it listens: at most one
futile claim per job, however many workers. Each wait in line lasts at most a poll (and a second) and asks,
in the same round trip, whether the queue has work; a worker in line claims when it has, so a
stalled holder delays work by a poll, never stops it, and an idle line costs one statement a poll
per worker. A dead holder's connection ends and with it the lock.
"""

from __future__ import annotations

import enum
from typing import Any

import psycopg

from queue_workflows import db
from queue_workflows.common import sqlfile

_WORKER = sqlfile.load("queue_workflows.worker", "worker.sql")

BATON_NAMESPACE = 0x5159  # beside the worker sessions' 0x5157

__all__ = ["BATON_NAMESPACE", "IdleBaton", "Turn"]


class Turn(enum.Enum):
    """What one wait in line came to."""

    HELD = "held"  # the baton is this worker's: it drains, then listens
    WORK = "work"  # still in line, but the queue has work (a stalled holder's): claim it
    WAIT = "wait"  # still in line, nothing to claim: wait again


class IdleBaton:
    """One worker's place in its queue's line; `held` is true only on the connection that took it."""

    def __init__(self, queue: str, *, wait_seconds: float) -> None:
        self.queue = queue
        self.wait_seconds = wait_seconds
        self._holder: db.Conn | None = None

    @property
    def params(self) -> dict[str, object]:
        return {"baton_namespace": BATON_NAMESPACE, "queue": self.queue}

    def held_on(self, conn: db.Conn) -> bool:
        """Held, and on this very connection (a reconnect drops a session lock with its session)."""
        return self._holder is conn and not conn.closed

    def take(self, conn: db.Conn) -> bool:
        """Wait in line up to `wait_seconds`; True once this worker holds the baton."""
        if self.held_on(conn):
            return True
        # One round trip: the function sets its lock_timeout locally, and autocommit ends it with the statement.
        return self._taken(conn, conn.execute(*self._take_statement()).fetchone())

    def wait_turn(self, conn: db.Conn, look: tuple[Any, dict[str, Any]]) -> Turn:
        """One wait in line and, in its round trip, `look` (a query whose `has_work` says whether a claim would find a job)."""
        if self.held_on(conn):
            return Turn.HELD
        took, looked = db.one_round_trip(conn, [self._take_statement(), look])
        if self._taken(conn, took.fetchone()):
            return Turn.HELD
        row = looked.fetchone()
        return Turn.WORK if row and row["has_work"] else Turn.WAIT

    def _take_statement(self) -> tuple[Any, dict[str, Any]]:
        return _WORKER.sql("take_idle_baton"), {**self.params, "wait_ms": max(1, int(self.wait_seconds * 1000))}

    def _taken(self, conn: db.Conn, row: Any) -> bool:
        if not (row and row["taken"]):
            discard_backlog(conn)  # not ours to act on; and psycopg would keep them all
            return False
        self._holder = conn
        discard_backlog(conn)  # what arrived while in line was for the previous holder
        return True

    def release(self, conn: db.Conn) -> None:
        """Hand the baton to the next in line (no-op unless held on `conn`)."""
        if self.held_on(conn):
            self._holder = None
            try:
                conn.execute(_WORKER.sql("release_idle_baton"), self.params)
            except psycopg.OperationalError:
                pass  # the session is gone, and the lock with it; the job just claimed must not be retried
        elif self._holder is not None and self._holder.closed:
            self._holder = None


def discard_backlog(conn: db.Conn) -> int:
    """Drop the notifications psycopg kept while nobody was listening; how many."""
    return sum(1 for _ in conn.notifies(timeout=0))
