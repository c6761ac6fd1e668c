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

import psycopg

from queue_workflows import db, jobstore
from queue_workflows.common import sqlfile
from queue_workflows.queries import JobTable

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

    def __init__(self, queue: str, table: JobTable, *, wait_seconds: float) -> None:
        self.queue = queue
        self._holder: db.Conn | None = None
        take = {**self.params, "wait_ms": max(1, int(wait_seconds * 1000))}
        # One round trip: the wait (its lock_timeout set locally), that timeout ended, then the look.
        self._wait = [(_WORKER.sql("take_idle_baton"), take), (_WORKER.sql("end_idle_baton_wait"), None),
                      jobstore.queue_has_work(table, queue)]

    @property
    def params(self) -> dict[str, object]:
        return {"baton_namespace": BATON_NAMESPACE, "queue": self.queue}

    def held_on(self, conn: db.Conn) -> bool:
        """Held, and on this very connection (a reconnect drops a session lock with its session)."""
        return self._holder is conn and not conn.closed

    def wait_turn(self, conn: db.Conn) -> Turn:
        """Wait in line up to `wait_seconds`; then whether the baton is ours, or else whether the queue has work."""
        if self.held_on(conn):
            return Turn.HELD
        took, _, looked = db.one_round_trip(conn, self._wait)
        discard_backlog(conn)  # in line, not ours to act on; once held, they were for the previous holder
        row = took.fetchone()
        if row and row["taken"]:
            self._holder = conn
            return Turn.HELD
        row = looked.fetchone()
        return Turn.WORK if row and row["has_work"] else Turn.WAIT

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
