"""Recovery and housekeeping: the one path by which an orphaned running job goes back to `queued`.

A running job is orphaned when its lease lapsed (the host vanished) or when no session holds
its worker's lock at two looks `orphan_confirm_seconds` apart (the process died: a live worker that lost a
connection has restored it by then). The same sweep promotes due delayed jobs, prunes the
heartbeat rows of dead workers, and flags wedged ones (stale heartbeat, job still running). See docs/liveness.md.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable

from queue_workflows import config, db, jobstore
from queue_workflows.common import sqlfile
from queue_workflows.common.listening import run_listening
from queue_workflows.jobstore import Row
from queue_workflows.node_queue import INGEST_TABLE, NODE_TABLE
from queue_workflows.queries import JobTable

_RECLAIM = sqlfile.load("queue_workflows.leader", "reclaim.sql")
log = logging.getLogger(__name__)

TABLES: tuple[JobTable, ...] = (NODE_TABLE, INGEST_TABLE)
Suspects = dict[JobTable, list[int]]


def find_suspects(conn: db.Conn | None = None) -> Suspects:
    """Running jobs whose worker lock nobody holds right now (restart grace aside)."""
    grace = config.current().settings.lease_seconds
    with db.transaction(conn) as c:
        return {table: jobstore.lockless_jobs(c, table, session_grace_seconds=grace) for table in TABLES}


def reclaim_confirmed(conn: db.Conn | None, suspects: Suspects) -> list[Row]:
    """Requeue (or, with attempts spent, fail) lapsed-lease jobs and the suspects still lockless now."""
    reclaimed: list[Row] = []
    with db.transaction(conn) as c:
        for table in TABLES:
            reclaimed.extend(jobstore.reclaim_orphans(c, table, suspects=suspects.get(table, [])))
    for row in reclaimed:
        log.warning(
            "reclaimed job %s on %r from %s (attempt %s) -> %s",
            row["id"], row["queue"], row["lost_by"], row["attempts"], row["status"],
        )
    return reclaimed


def reclaim_orphans(conn: db.Conn | None = None, *, confirm_seconds: float | None = None) -> list[Row]:
    """One recovery pass: look for lockless jobs, look again after `confirm_seconds`, reclaim.

    `confirm_seconds` defaults to `orphan_confirm_seconds`, the same window the orchestrator gives.
    """
    suspects = find_suspects(conn)
    if any(suspects.values()):
        wait = config.current().settings.orphan_confirm_seconds if confirm_seconds is None else confirm_seconds
        time.sleep(wait)
    return reclaim_confirmed(conn, suspects)


class ReclaimLoop:
    """The orchestrator's sweep, every `reclaim_interval_seconds` until stopped, riding out outages."""

    def __init__(
        self,
        *,
        stop_event: threading.Event,
        interval: float | None = None,
        guard: Callable[[db.Conn], None] | None = None,
        now_fn: Callable[[], float] = time.monotonic,
    ) -> None:
        settings = config.current().settings
        self.stop_event = stop_event
        self.interval = interval or settings.reclaim_interval_seconds
        self.confirm_seconds = min(self.interval, settings.orphan_confirm_seconds)
        self.heartbeat_stale_seconds = 3 * settings.heartbeat_seconds
        self.guard = guard
        self.now_fn = now_fn
        self.total = 0
        self.by_queue: dict[str, int] = {}  # reclaims per queue, for the cluster metrics
        self.suspects: Suspects = {}
        self._next_prune = 0.0

    def sweep(self, conn: db.Conn) -> None:
        reclaimed = reclaim_confirmed(conn, self.suspects)
        self.total += len(reclaimed)
        for row in reclaimed:
            self.by_queue[row["queue"]] = self.by_queue.get(row["queue"], 0) + 1
        self.suspects = find_suspects(conn)
        for table in TABLES:
            jobstore.promote_due(conn, table)
        if self.now_fn() >= self._next_prune:
            pruned = jobstore.prune_dead_heartbeats(conn, stale_after_seconds=self.heartbeat_stale_seconds)
            if pruned:
                log.info("pruned %d heartbeat row(s) of dead workers", len(pruned))
            for row in jobstore.flag_dead_workers(conn, stale_after_seconds=self.heartbeat_stale_seconds):
                log.error(
                    "DEAD WORKER: %s (host %s, queue %s, pid %s) has sent no heartbeat for %.0fs but still owns "
                    "running job %s; its lease will requeue the job. Restart that process on %s.",
                    row["worker_id"], row["host_label"], row["queue"], row["pid"], row["silent_seconds"],
                    row["job_id"], row["host_label"],
                )
            for row in jobstore.flag_unassignable(conn):
                if row["unassignable_reason"]:
                    log.error("UNASSIGNABLE: gpu job %s: %s", row["id"], row["unassignable_reason"])
                else:
                    log.info("gpu job %s (model %s) fits a live worker again", row["id"], row["required_model"])
            self._next_prune = self.now_fn() + self.heartbeat_stale_seconds / 3

    def _quiet(self, conn: db.Conn) -> float | None:
        """The interval when the sweep has nothing to act on: one unguarded read that writes nothing."""
        if any(self.suspects.values()) or self.now_fn() >= self._next_prune:
            return None
        row = conn.execute(_RECLAIM["sweep_has_work"]).fetchone()
        return None if row is None or row["busy"] else self.interval

    def _step(self, conn: db.Conn) -> float:
        """One sweep; then the wait: the confirmation window while there are suspects, else the interval."""
        self.sweep(conn)
        return self.confirm_seconds if any(self.suspects.values()) else self.interval

    def run_forever(self) -> None:
        run_listening(self.stop_event, what="reclaim sweep", channel=None, step=self._step, guard=self.guard, quiet=self._quiet)
