"""What an operator asks of the queue: overview, workers, jobs, one job's story; cancel and retry.

Jobs live in two tables whose ids overlap, so a job is named `ingest:ID` or `node:ID`; a bare
ID is accepted when only one table has it.
"""

from __future__ import annotations

import re
from typing import Any

from psycopg.rows import dict_row

from queue_workflows import config, db
from queue_workflows.common import sqlfile
from queue_workflows.errors import InvalidNameError, InvalidPayloadError, QueueWorkflowsError
from queue_workflows.jobrow import JobStatus
from queue_workflows.leader import leadership
from queue_workflows.node_queue import INGEST_TABLE, NODE_QUEUES, NODE_TABLE
from queue_workflows.payloads import check_text, shown
from queue_workflows.queries import JobTable

_ADMIN = sqlfile.load("queue_workflows.ops", "admin.sql")
_JOBS = sqlfile.load("queue_workflows", "jobs.sql")

FAMILIES: dict[str, JobTable] = {"ingest": INGEST_TABLE, "node": NODE_TABLE}
STATUSES = tuple(s.value for s in JobStatus)
_REF_RE = re.compile(r"^(?:(ingest|node):)?([1-9][0-9]{0,18})$")


class JobNotFoundError(QueueWorkflowsError, LookupError):
    """No job by that reference (or, for cancel/retry, not in a state that allows it)."""


def _rows(conn: db.Conn | None, statement: Any, params: dict[str, Any]) -> list[dict[str, Any]]:
    with db.transaction(conn) as c:
        return c.cursor(row_factory=dict_row).execute(statement, params).fetchall()


def resolve(ref: str, conn: db.Conn | None = None) -> tuple[JobTable, dict[str, Any]]:
    match = _REF_RE.match(str(ref).strip())
    if not match:
        raise InvalidNameError(f"job reference {shown(ref)} is invalid: use ID, ingest:ID or node:ID")
    family, job_id = match.group(1), int(match.group(2))
    tables = [FAMILIES[family]] if family else [INGEST_TABLE, NODE_TABLE]
    found = [(t, rows[0]) for t in tables if (rows := _rows(conn, _ADMIN.sql("get_job", f"{t}_all"), {"job_id": job_id}))]
    if not found:
        raise JobNotFoundError(f"no job {ref}")
    if len(found) > 1:
        raise InvalidNameError(f"job {job_id} exists as ingest:{job_id} and node:{job_id}; say which")
    return found[0]


def queue_overview(conn: db.Conn | None = None) -> list[dict[str, Any]]:
    """One row per (family, queue): counts by status and the age of the oldest queued job."""
    out: list[dict[str, Any]] = []
    families = (("node", NODE_TABLE, NODE_QUEUES), ("ingest", INGEST_TABLE, config.current().settings.ingest_queues))
    for family, table, known in families:
        per: dict[str, dict[str, Any]] = {q: {"family": family, "queue": q, **{s: 0 for s in STATUSES}, "oldest_queued_s": None} for q in sorted(known)}
        for row in _rows(conn, _JOBS.sql("queue_counts", table), {}):
            entry = per.setdefault(row["queue"], {"family": family, "queue": row["queue"], **{s: 0 for s in STATUSES}, "oldest_queued_s": None})
            entry[row["status"]] = row["n"]
            if row["oldest_queued_s"] is not None:
                entry["oldest_queued_s"] = row["oldest_queued_s"]
        out.extend(per.values())
    return out


def worker_list(conn: db.Conn | None = None) -> list[dict[str, Any]]:
    return _rows(conn, _ADMIN.sql("worker_list"), {})


def orchestrator_list(conn: db.Conn | None = None) -> list[dict[str, Any]]:
    """Every orchestrator beating lately, leader first: id, hostname, host_label, pid, role, epoch, silent_seconds."""
    return leadership.orchestrators(conn)


def list_jobs(queue: str | None = None, status: str | None = None, limit: int = 50, conn: db.Conn | None = None) -> list[dict[str, Any]]:
    if status is not None and status not in STATUSES:
        raise InvalidPayloadError(f"status must be one of {', '.join(STATUSES)}, not {shown(status)}")
    if queue is not None:
        check_text(queue, what="queue", max_chars=32)
    if isinstance(limit, bool) or not isinstance(limit, int) or not 1 <= limit <= 10_000:
        raise InvalidPayloadError(f"limit must be an integer from 1 to 10000, not {shown(limit)}")
    return _rows(conn, _ADMIN.sql("list_jobs"), {"queue": queue, "status": status, "limit": limit})


def job_detail(ref: str, conn: db.Conn | None = None) -> dict[str, Any]:
    """The job's row (as `job`), its family, and its events off the happy path, oldest first."""
    table, row = resolve(ref, conn)
    events = _rows(conn, _ADMIN.sql("job_events_for"), {"job_table": table, "job_id": row["id"]})
    family = "ingest" if table == INGEST_TABLE else "node"
    return {"family": family, "ref": f"{family}:{row['id']}", "job": row, "events": events}


def cancel_job(ref: str, *, reason: str | None = None, conn: db.Conn | None = None) -> dict[str, Any]:
    """Cancel a scheduled, queued or running job; a running one's worker stops it (exit 77)."""
    if reason is not None:
        check_text(reason, what="reason", max_chars=200)
    table, row = resolve(ref, conn)
    note = f"cancelled by the operator: {reason}" if reason else None
    done = _rows(conn, _ADMIN.sql("cancel_job", table), {"job_id": row["id"], "reason": note})
    if not done:
        raise JobNotFoundError(f"job {ref} is {row['status']}: only scheduled, queued or running jobs can be cancelled")
    return done[0]


def retry_job(ref: str, conn: db.Conn | None = None) -> dict[str, Any]:
    """Put a failed or cancelled job back in its queue with fresh attempts.

    A node of a failed or cancelled workflow run is refused (JobNotFoundError, nothing written):
    the run's guard trigger would cancel it at once, and the run would not move; `restart_run`
    is what runs such a run's unfinished nodes again.
    """
    with db.transaction(conn) as c, c.transaction(), c.cursor(row_factory=dict_row) as cur:
        table, row = resolve(ref, c)
        run_id = row.get("run_id") if table == NODE_TABLE else None
        if run_id is not None:
            run = cur.execute(_ADMIN.sql("lock_run_of_node_job"), {"run_id": run_id}).fetchone()
            if run is not None and run["status"] in ("failed", "cancelled"):
                raise JobNotFoundError(f"job {ref} is a node of workflow run {run_id}, which is {run['status']}: a node of an ended run "
                                       f"cannot be retried alone; restart the run instead (qw restart {run_id})")
        if table == INGEST_TABLE:
            cur.execute(_ADMIN.sql("restore_ingest_job"), {"job_id": row["id"]})
        done = cur.execute(_ADMIN.sql("operator_retry_job", table), {"job_id": row["id"]}).fetchall()
    if not done:
        raise JobNotFoundError(f"job {ref} is {row['status']}: only failed or cancelled jobs can be retried")
    return done[0]


RUN_STATUSES = ("queued", "running", "awaiting_input", "completed", "failed", "cancelled")


def list_runs(status: str | None = None, limit: int = 50, conn: db.Conn | None = None) -> list[dict[str, Any]]:
    """Workflow runs, newest first, with their node counts."""
    if status is not None and status not in RUN_STATUSES:
        raise InvalidPayloadError(f"run status must be one of {', '.join(RUN_STATUSES)}, not {shown(status)}")
    if isinstance(limit, bool) or not isinstance(limit, int) or not 1 <= limit <= 10_000:
        raise InvalidPayloadError(f"limit must be an integer from 1 to 10000, not {shown(limit)}")
    return _rows(conn, _ADMIN.sql("list_runs"), {"status": status, "limit": limit})

