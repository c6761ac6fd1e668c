"""The scheduler's reads and writes: the database clock, the slot ledger, and the enqueue.

A slot's ledger row and its ingest job commit in one transaction, so a scheduler killed at
any point leaves either both or neither: a slot never has a row without its job, and a
killed replica's half-done slot is free for another replica to take.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import datetime
from typing import Any

import psycopg
from psycopg import sql

from queue_workflows import config, db, node_queue
from queue_workflows.common import sqlfile
from queue_workflows.jobstore import Row
from queue_workflows.schedule.entries import ScheduleEntry
from queue_workflows.schedule.slots import Fire, reason

_SCHEDULE = sqlfile.load("queue_workflows.schedule", "schedule.sql")

RUN_KINDS = ("slot", "catch_up")
ALL_KINDS = ("slot", "catch_up", "boot")


def replica_id() -> str:
    """`host:pid`, written on every slot row this process enqueues."""
    return f"{config.current().settings.host_label}:{os.getpid()}"


class SlotStore:
    """One autocommit connection, opened on first use and again after a connection error."""

    def __init__(self, *, url: str | None = None, replica: str | None = None) -> None:
        self.url = url
        self.replica = replica or replica_id()
        self._conn: db.Conn | None = None

    @contextmanager
    def _connection(self) -> Iterator[db.Conn]:
        if self._conn is None or self._conn.closed:
            self._conn = db.connect(autocommit=True, url=self.url)
        try:
            yield self._conn
        except psycopg.OperationalError:
            self.close()  # the next call reconnects
            raise

    def close(self) -> None:
        conn, self._conn = self._conn, None
        if conn is not None:
            conn.close()

    def db_now(self) -> datetime:
        with self._connection() as conn:
            row = conn.execute(_SCHEDULE.sql("schedule_now")).fetchone()
        assert row is not None
        now: datetime = row["now"]
        return now

    def last_slots(self, kinds: tuple[str, ...] = RUN_KINDS) -> dict[str, Row]:
        """Per entry name, its latest ledger row of `kinds`."""
        with self._connection() as conn:
            rows = conn.execute(_SCHEDULE.sql("schedule_last_slots"), {"kinds": list(kinds)}).fetchall()
        return {row["entry_name"]: row for row in rows}

    def fire(self, entry: ScheduleEntry, fire: Fire) -> Row | None:
        """Take `fire.slot` for `entry` and enqueue its job, in one transaction; None if already taken."""
        return self._claim_and_enqueue(_SCHEDULE.sql("schedule_claim_slot"), entry, fire, {})

    def boot(self, entry: ScheduleEntry, fire: Fire, window_seconds: float) -> Row | None:
        """The boot kick, unless one for `entry` ran within `window_seconds` of `fire.slot`; serialised per entry."""
        return self._claim_and_enqueue(_SCHEDULE.sql("schedule_claim_boot"), entry, fire, {"window_seconds": window_seconds}, lock=True)

    def _claim_and_enqueue(self, claim: sql.SQL | sql.Composed, entry: ScheduleEntry, fire: Fire, extra: dict[str, Any], lock: bool = False) -> Row | None:
        params = {
            "entry_name": entry.name,
            "slot_time": fire.slot,
            "kind": fire.kind,
            "task_name": entry.task_name,
            "queue": entry.queue,
            "enqueued_by": self.replica,
            **extra,
        }
        with self._connection() as conn, conn.transaction():
            if lock:
                conn.execute(_SCHEDULE.sql("schedule_lock_entry"), params)
            if conn.execute(claim, params).fetchone() is None:
                return None
            args = dict(entry.args) if entry.args is not None else None
            job = node_queue.enqueue_ingest_job(entry.task_name, entry.queue, args, reason=reason(entry.name, fire), conn=conn)
            conn.execute(_SCHEDULE.sql("schedule_set_job"), {**params, "job_id": job["id"]})
        return job

    def prune(self, before: datetime) -> int:
        """Delete ledger rows older than `before`, keeping each entry's latest slot."""
        with self._connection() as conn:
            return conn.execute(_SCHEDULE.sql("schedule_prune"), {"before": before}).rowcount
