"""Row-level operations shared by both job tables: claim, lease, terminal marks, reclaim."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from psycopg.rows import dict_row

from queue_workflows import config, db, queries
from queue_workflows.common import sqlfile
from queue_workflows.jobrow import JobStatus
from queue_workflows.queries import JobTable

_GPU = sqlfile.load("queue_workflows.gpu", "claim.sql")
_JOBS = sqlfile.load("queue_workflows", "jobs.sql")
_RECLAIM = sqlfile.load("queue_workflows.leader", "reclaim.sql")

# Advisory-lock namespace (first int4 key) for worker sessions; the second key is the worker's lock_key.
# The view qw_worker_sessions (migration 0007) spells the same number.
WORKER_LOCK_NAMESPACE = 0x5157

Row = dict[str, Any]

# A gpu claim naming no device (CPU fallback, no NVML): no VRAM admission (gpu/devices.py claim_params).
NO_DEVICES: dict[str, Any] = {"gpu_uuids": [], "gpu_total_gb": [], "gpu_free_gb": [], "vram_margin_gb": 0.0}


@dataclass(frozen=True)
class Claimant:
    """Who claims: the worker id stamped into `claimed_by` and the session lock it holds."""

    worker_id: str
    lock_key: int


Statement = tuple[Any, dict[str, Any]]


def fetch_one(conn: db.Conn | None, statement: Statement) -> Row | None:
    """Run one statement (on the caller's connection and transaction, or a pooled one) and fetch its row.

    The row is a dict whatever row factory the caller's connection was opened with.
    """
    with db.transaction(conn) as c, c.cursor(row_factory=dict_row) as cur:
        return cur.execute(*statement).fetchone()


def claim_statement(
    table: JobTable,
    queue: str,
    claimant: Claimant,
    *,
    lease_seconds: float,
    claim_order: str,
    current_model: str | None = None,
    with_affinity: bool = False,
    loaded_models: Sequence[str] = (),
    vram_available_gb: float | None = None,
    second_copy_backlog: int = 2,
    gang_hold_seconds: float | None = None,
    aging_seconds: float = 0,
    gpu_devices: Mapping[str, Any] | None = None,
) -> Statement:
    """`gpu_devices`: a routed gpu claim's device parameters (gpu/devices.py claim_params); none: no VRAM admission."""
    params: dict[str, Any] = {
        "aging_seconds": aging_seconds,
        "queue": queue,
        "worker_id": claimant.worker_id,
        "lock_key": claimant.lock_key,
        "lease_seconds": lease_seconds,
        "current_model": current_model,
    }
    if with_affinity:
        params.update(loaded_models=list(loaded_models), vram_available_gb=vram_available_gb, second_copy_backlog=second_copy_backlog,
                      gang_hold_seconds=gang_hold_seconds)
        params.update(gpu_devices if gpu_devices is not None else NO_DEVICES)
    return queries.claim_query(table, claim_order, with_affinity), params


def mark_statement(
    table: JobTable, outcome: str, job_id: int, *, result: Any = None, error: str | None = None, worker_id: str | None = None
) -> Statement:
    """`outcome` is completed or failed; the row comes back None when already terminal (or no longer ours)."""
    if outcome not in (JobStatus.COMPLETED, JobStatus.FAILED):
        raise ValueError(f"terminal outcome must be 'completed' or 'failed', not {outcome!r}")
    params = {"job_id": job_id, "worker_id": worker_id, "result": result, "error": error}
    return (_JOBS.sql("mark_completed", table) if outcome == "completed" else _JOBS.sql("mark_failed", table)), params


def retry_statement(table: JobTable, job_id: int, worker_id: str, *, error: str, delay_seconds: float) -> Statement:
    """Requeue a failed attempt after `delay_seconds`; no row when attempts are spent or the job is not ours."""
    params = {"job_id": job_id, "worker_id": worker_id, "error": error, "delay_seconds": delay_seconds}
    return _JOBS.sql("retry_job", table), params


def watchdog_trip_statement(table: JobTable, job_id: int, worker_id: str, *, error: str, max_trips: int) -> Statement:
    """Requeue the caller's running job without charging an attempt, or fail it at the watchdog cap."""
    params = {"job_id": job_id, "worker_id": worker_id, "error": error, "max_trips": max_trips}
    return _JOBS.sql("watchdog_trip", table), params


def mark(table: JobTable, outcome: str, job_id: int, *, conn: db.Conn | None = None, **kwargs: Any) -> Row | None:
    return fetch_one(conn, mark_statement(table, outcome, job_id, **kwargs))


def release(conn: db.Conn | None, table: JobTable, job_ids: Sequence[int], worker_id: str) -> set[int]:
    """Hand the caller's running jobs back uncharged; the ids that were still its own."""
    with db.transaction(conn) as c, c.cursor(row_factory=dict_row) as cur:
        return {r["id"] for r in cur.execute(_JOBS.sql("release_job", table), {"ids": list(job_ids), "worker_id": worker_id})}


def renew_lease(conn: db.Conn, table: JobTable, job_ids: Sequence[int], worker_id: str, lease_seconds: float) -> set[int]:
    """Extend the lease of the caller's running jobs; the ids it still holds (a missing one was taken)."""
    params = {"ids": list(job_ids), "worker_id": worker_id, "lease_seconds": lease_seconds}
    with db.transaction(conn) as c, c.cursor(row_factory=dict_row) as cur:
        return {r["id"] for r in cur.execute(_JOBS.sql("renew_lease", table), params)}


def lockless_jobs(conn: db.Conn, table: JobTable, *, session_grace_seconds: float) -> list[int]:
    """Ids of running jobs that no session holds the worker lock for (outside a restart's grace)."""
    with db.transaction(conn) as c:
        rows = c.execute(_RECLAIM.sql("lockless_jobs", table), {"session_grace_seconds": session_grace_seconds}).fetchall()
    return [row["id"] for row in rows]


def reclaim_orphans(conn: db.Conn, table: JobTable, *, suspects: list[int]) -> list[Row]:
    """Requeue (or fail) lapsed-lease jobs, and those `suspects` that are still lockless."""
    with db.transaction(conn) as c:
        return c.execute(_RECLAIM.sql("reclaim_orphans", table), {"suspects": suspects}).fetchall()


def queue_has_work(table: JobTable, queue: str) -> Statement:
    """Whether a claim on `queue` could find a job (queued, or delayed and due): `has_work`."""
    return _JOBS.sql("queue_has_work", table), {"queue": queue}


def promote_due(conn: db.Conn, table: JobTable, queue: str | None = None, *, limit: int = 1000) -> int:
    """Make delayed jobs whose `run_after` has come claimable (one queue, or all); returns how many."""
    with db.transaction(conn) as c:
        return len(c.execute(_JOBS.sql("promote_due_jobs", table), {"queue": queue, "limit": limit}).fetchall())


def flag_dead_workers(conn: db.Conn, *, stale_after_seconds: float) -> list[Row]:
    """Flag (once) workers whose heartbeat is stale while they still own a running job."""
    with db.transaction(conn) as c:
        return c.execute(_RECLAIM.sql("flag_dead_workers"), {"stale_after_seconds": stale_after_seconds}).fetchall()


def flag_unassignable(conn: db.Conn, *, margin_gb: float | None = None) -> list[Row]:
    """Set (or clear) the reason on queued gpu jobs no live gpu worker has the devices for; the rows changed.
    `margin_gb`: what a claim leaves unreserved on each device (default QW_GPU_VRAM_MARGIN_GB)."""
    if margin_gb is None:
        margin_gb = float(config.current().settings.gpu_vram_margin_gb)
    with conn.cursor(row_factory=dict_row) as cur:
        return cur.execute(_GPU.sql("flag_unassignable"), {"vram_margin_gb": margin_gb}).fetchall()


def prune_dead_heartbeats(conn: db.Conn, *, stale_after_seconds: float) -> list[str]:
    with db.transaction(conn) as c:
        rows = c.execute(_RECLAIM.sql("prune_dead_heartbeats"), {"stale_after_seconds": stale_after_seconds}).fetchall()
    return [row["worker_id"] for row in rows]


COUNTED_STATUSES = tuple(s.value for s in (JobStatus.SCHEDULED, JobStatus.QUEUED, JobStatus.RUNNING, JobStatus.COMPLETED, JobStatus.FAILED))


def queue_counts(conn: db.Conn, table: JobTable, queues: frozenset[str], *, stale_after_seconds: float) -> dict[str, dict[str, Any]]:
    """Per queue: job counts by status, live workers, and the age of the oldest queued job (None: none queued)."""
    counts: dict[str, dict[str, Any]] = {
        q: {**dict.fromkeys(COUNTED_STATUSES, 0), "workers": 0, "oldest_queued_s": None}
        for q in sorted(queues)
    }
    for row in conn.execute(_JOBS.sql("queue_counts", table)):
        if row["queue"] in counts and row["status"] in counts[row["queue"]]:
            counts[row["queue"]][row["status"]] = row["n"]
            if row["oldest_queued_s"] is not None:
                counts[row["queue"]]["oldest_queued_s"] = row["oldest_queued_s"]
    for row in conn.execute(_JOBS.sql("live_workers"), {"stale_after_seconds": stale_after_seconds}):
        if row["queue"] in counts:
            counts[row["queue"]]["workers"] = row["n"]
    return counts
