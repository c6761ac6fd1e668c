"""History mover: the leading orchestrator moves finished jobs from the hot tables into day-partitioned history.

A job finished more than `QW_HISTORY_AFTER_SECONDS` ago (0: never) leaves `ingest_jobs` or
`workflow_node_jobs` for `ingest_jobs_history` / `workflow_node_jobs_history` (migration 0053), one
small batch per table per step, each step its own short transaction: claims and sweeps on the hot
tables only walk live work, and retention drops a whole day instead of deleting rows. The same
batches move the rows of a database upgraded from before 0053, online. Readers that must see a job
wherever it lives read `ingest_jobs_all` / `workflow_node_jobs_all`.
"""

from __future__ import annotations

import datetime as dt
import logging
from typing import Any

from queue_workflows import config, db
from queue_workflows.common import sqlfile
from queue_workflows.leader.batched import BatchedService

log = logging.getLogger(__name__)

_HISTORY = sqlfile.load("queue_workflows.leader", "history.sql")
MOVES = {"move_ingest_jobs": _HISTORY["move_ingest_jobs"], "move_standalone_node_jobs": _HISTORY["move_standalone_node_jobs"],
         "move_run_node_jobs": _HISTORY["move_run_node_jobs"]}
DAYS_AHEAD = 3  # partitions made past today, so a day's first move never waits on a CREATE


def ensure_partitions(conn: db.Conn, *, keep_seconds: float, covered: tuple[dt.date, dt.date] | None = None) -> tuple[dt.date, dt.date] | None:
    """Day partitions from the oldest movable row's day (within retention) to today + DAYS_AHEAD; the days now covered."""
    row = conn.execute(_HISTORY["oldest_movable"], {"keep_seconds": keep_seconds}).fetchone()
    assert row is not None
    oldest, today, kept_from = row["oldest"], row["today"], row["kept_from"]
    # A day early: a completed run's skipped node may have finished before its oldest completed one.
    first = today if oldest is None else oldest.astimezone(dt.UTC).date() - dt.timedelta(days=1)
    if kept_from is not None:
        first = max(first, kept_from)
    first, last = min(first, today), today + dt.timedelta(days=DAYS_AHEAD)
    if covered is not None and covered[0] <= first and last <= covered[1]:
        return covered
    conn.execute(_HISTORY["ensure_partitions"], {"from_day": first, "to_day": last})
    return (first, last)


def move_once(conn: db.Conn, *, batch: int = 500, covered: tuple[dt.date, dt.date] | None = None) -> tuple[dict[str, int], tuple[dt.date, dt.date] | None]:
    """One batch from each hot table into history (nothing while `history_after_seconds` is 0): rows moved, by query name."""
    settings = config.current().settings
    if settings.history_after_seconds <= 0:
        return {}, covered
    covered = ensure_partitions(conn, keep_seconds=settings.retain_finished_seconds, covered=covered)
    params = {"after_seconds": settings.history_after_seconds, "keep_seconds": settings.retain_finished_seconds, "batch": batch}
    return {name: conn.execute(statement, params).rowcount for name, statement in MOVES.items()}, covered


class HistoryMover(BatchedService):
    """The leader's mover: a step every `retention_interval_seconds`, every `pause` while batches come full."""

    what, done, prefix, log_level = "history", "moved", "move_", logging.DEBUG

    def __init__(self, *, pause: float = 0.05, **kwargs: Any) -> None:
        super().__init__(pause=pause, **kwargs)
        self.covered: tuple[dt.date, dt.date] | None = None  # the partitions known to exist, so a step makes none it need not

    def batch_once(self, conn: db.Conn) -> dict[str, int]:
        moved, self.covered = move_once(conn, batch=self.batch, covered=self.covered)
        return moved
