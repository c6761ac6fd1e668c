"""The operator dashboard's reads the admin module lacks: workers with their switch, throughput, a run's graph.

They live in the engine so a service never writes SQL of its own; each is one named query in
`sql/overview.sql` and returns plain dicts.
"""

from __future__ import annotations

from typing import Any

from psycopg import sql
from psycopg.rows import dict_row

from queue_workflows import db
from queue_workflows.common import sqlfile
from queue_workflows.errors import InvalidPayloadError
from queue_workflows.jobrow import JobStatus
from queue_workflows.node_queue import INGEST_TABLE, NODE_QUEUES, NODE_TABLE
from queue_workflows.ops.admin import STATUSES
from queue_workflows.payloads import check_text, shown
from queue_workflows.telemetry.store import loaded_models

_OVERVIEW = sqlfile.load("queue_workflows.ops", "overview.sql")

__all__ = ["empty_throughput", "run_graph", "search_jobs", "throughput", "worker_overview"]


def _rows(conn: db.Conn | None, statement: sql.SQL | sql.Composed, params: dict[str, Any]) -> list[dict[str, Any]]:
    with db.transaction(conn) as c:
        return c.cursor(row_factory=dict_row).execute(statement, params).fetchall()


def _display_state(row: dict[str, Any]) -> str:
    if row["worker_id"] is None:
        return "absent"
    if row["last_flagged_dead_at"] is not None or not row["connected"]:
        return "dead"
    return str(row["state"])


def worker_overview(conn: db.Conn | None = None) -> list[dict[str, Any]]:
    """One row per worker process (and per switch with no process): its shown state, job, warm models and switch.

    `display_state` is the heartbeat's state, `dead` when flagged or its session is gone, and
    `absent` for a switch no live process answers to; `desired_state` is 'on' with no row.
    """
    out = []
    for row in _rows(conn, _OVERVIEW.sql("overview_workers"), {}):
        family = "node" if row["queue"] in NODE_QUEUES else "ingest"
        row["display_state"] = _display_state(row)
        row["models"] = loaded_models(row.pop("heartbeat"))
        row["current_job"] = f"{family}:{row['current_job_id']}" if row["current_job_id"] else None
        row["desired_state"] = row["desired_state"] or "on"
        out.append(row)
    return out


THROUGHPUT_MINUTES = 15


def throughput(conn: db.Conn | None = None) -> dict[str, dict[str, Any]]:
    """Per queue: jobs completed in the last 1, 5 and 15 minutes, failed in the last 15, and completions per minute (oldest first)."""
    out: dict[str, dict[str, Any]] = {}
    for table in (NODE_TABLE, INGEST_TABLE):
        for row in _rows(conn, _OVERVIEW.sql("overview_throughput", f"{table}_all"), {}):
            entry = out.setdefault(row["queue"], empty_throughput())
            minute, n = min(max(int(row["minutes_ago"]), 0), THROUGHPUT_MINUTES - 1), int(row["n"])
            if row["status"] == JobStatus.FAILED:
                entry["failed_15m"] += n
                continue
            entry["completed_15m"] += n
            entry["completed_5m"] += n if minute < 5 else 0
            entry["completed_1m"] += n if minute < 1 else 0
            entry["per_minute"][THROUGHPUT_MINUTES - 1 - minute] += n
    return out


def empty_throughput() -> dict[str, Any]:
    """A queue's throughput with nothing finished lately."""
    return {"completed_1m": 0, "completed_5m": 0, "completed_15m": 0, "failed_15m": 0, "per_minute": [0] * THROUGHPUT_MINUTES}


def run_graph(run_id: int, conn: db.Conn | None = None) -> dict[str, Any] | None:
    """A run and every node of its definition with its dependencies, state, attempts and timing; None if no such run."""
    if isinstance(run_id, bool) or not isinstance(run_id, int):
        raise InvalidPayloadError(f"run id must be an integer, not {shown(run_id)}")
    runs = _rows(conn, _OVERVIEW.sql("overview_run"), {"run_id": run_id})
    if not runs:
        return None
    run = runs[0]
    rows = {r["node_name"]: r for r in _rows(conn, _OVERVIEW.sql("overview_run_nodes"), {"run_id": run_id})}
    defined = (run.pop("definition") or {}).get("nodes", [])
    nodes = []
    for spec in defined or [{"id": name} for name in rows]:
        row = rows.get(spec["id"])
        nodes.append({
            "id": spec["id"], "deps": list(spec.get("deps", [])), "kind": spec.get("kind", "task"),
            "queue": spec.get("queue") or (row and row["queue"]), "model": spec.get("model"),
            "status": row["status"] if row else "pending", "job": row,
        })
    run["nodes"] = nodes
    return run


def search_jobs(queue: str | None = None, status: str | None = None, task: str | None = None, limit: int = 100,
                conn: db.Conn | None = None) -> list[dict[str, Any]]:
    """Jobs of both tables, newest first, filtered by queue, status and a substring of the task (or node) name."""
    if status is not None and status not in STATUSES:
        raise InvalidPayloadError(f"status must be one of {', '.join(STATUSES)}, not {shown(status)}")
    if queue is not None:
        check_text(queue, what="queue", max_chars=32)
    if task is not None:
        check_text(task, what="task", max_chars=200)
    if isinstance(limit, bool) or not isinstance(limit, int) or not 1 <= limit <= 10_000:
        raise InvalidPayloadError(f"limit must be an integer from 1 to 10000, not {shown(limit)}")
    return _rows(conn, _OVERVIEW.sql("overview_search_jobs"), {"queue": queue, "status": status, "task": task, "limit": limit})
