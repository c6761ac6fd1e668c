"""What a GPU out-of-memory does to its job and to its model's need, and each model's needs for `qw models`."""

from __future__ import annotations

from typing import Any

from psycopg.rows import dict_row

from queue_workflows import db
from queue_workflows.common import sqlfile
from queue_workflows.jobrow import Job, NodeJob
from queue_workflows.jobstore import Statement
from queue_workflows.queries import JobTable

_LEARN = sqlfile.load("queue_workflows.gpu", "learn.sql")

# A placement that ran out was short by an unknown amount: half as much again moves the next one
# clearly (1.5, 2.25, 3.4x in three OOMs) without doubling the card a model reserves on one bad job.
OOM_RAISE_FACTOR = 1.5


def oom_requeue_statement(table: JobTable, job_id: int, worker_id: str, *, error: str) -> Statement:
    """The first OOM of a job: requeued uncharged and marked (matches nothing once it is marked)."""
    return _LEARN.sql("oom_requeue", table), {"job_id": job_id, "worker_id": worker_id, "error": error}


def raise_need_statements(job: Job, *, held_bytes: int | None, free_gb: float | None) -> list[Statement]:
    """Raise the need of the job's model (none for a job without one)."""
    if not isinstance(job, NodeJob) or not job.required_model:
        return []
    held_gb = None if held_bytes is None else held_bytes / 2**30 / max(job.gpus, 1)  # the need is per device
    params = {"model": job.required_model, "factor": OOM_RAISE_FACTOR, "held_gb": held_gb, "free_gb": free_gb}
    return [(_LEARN.sql("raise_need_after_oom"), params)]


def model_needs(*, conn: db.Conn | None = None) -> list[dict[str, Any]]:
    """Per model: declared_gb, learned_gb (with samples), oom_gb, need_gb (what routing uses) and its tasks' p95s."""
    with db.transaction(conn) as c, c.cursor(row_factory=dict_row) as cur:
        return list(cur.execute(_LEARN.sql("model_needs")).fetchall())


__all__ = ["OOM_RAISE_FACTOR", "model_needs", "oom_requeue_statement", "raise_need_statements"]
