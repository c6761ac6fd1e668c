"""Retention: the leading orchestrator deletes finished rows past their window, in small batches.

Finished jobs and runs are kept `QW_RETAIN_FINISHED_SECONDS` (a run goes with its nodes, outbox
events and input submissions), the event log and processed outbox rows
`QW_RETAIN_EVENTS_SECONDS`; 0 keeps them forever. Jobs the history mover moved go a whole day
partition at a time (`drop_history`, counted in partitions). One batch per table per step, each step its
own short transaction, so the claim path never waits behind a long delete; a backlog of old
rows is worked off step after step, `pause` apart, so pruning a million rows takes a share of
the server rather than all of it.
"""

from __future__ import annotations

import logging

from queue_workflows import config, db
from queue_workflows.common import sqlfile
from queue_workflows.leader.batched import BatchedService

log = logging.getLogger(__name__)

_RETENTION = sqlfile.load("queue_workflows.leader", "retention.sql")
FINISHED = {"prune_ingest_jobs": _RETENTION["prune_ingest_jobs"], "prune_node_jobs": _RETENTION["prune_node_jobs"],
            "prune_runs": _RETENTION["prune_runs"], "drop_history": _RETENTION["drop_history"]}
EVENTS = {"prune_job_events": _RETENTION["prune_job_events"], "prune_dispatch_events": _RETENTION["prune_dispatch_events"],
          "prune_workflow_events": _RETENTION["prune_workflow_events"], "prune_worker_exits": _RETENTION["prune_worker_exits"]}


def prune_once(conn: db.Conn, *, batch: int = 500) -> dict[str, int]:
    """One batch from each table whose window is set: rows deleted, by query name."""
    settings = config.current().settings
    deleted: dict[str, int] = {}
    for names, keep in ((FINISHED, settings.retain_finished_seconds), (EVENTS, settings.retain_events_seconds)):
        if keep <= 0:
            continue
        for name, statement in names.items():
            cursor = conn.execute(statement, {"keep_seconds": keep, "batch": batch})
            deleted[name] = cursor.fetchone()["dropped"] if name == "drop_history" else cursor.rowcount  # type: ignore[index]
    return deleted


class Retention(BatchedService):
    """The leader's pruning service: a step every `retention_interval_seconds`, every `pause` while batches come full."""

    what, done, prefix = "retention", "pruned", "prune_"

    def batch_once(self, conn: db.Conn) -> dict[str, int]:
        return prune_once(conn, batch=self.batch)
