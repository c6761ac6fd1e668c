"""Typed job rows: the one status enum and the frozen rows a worker claims, built where the database hands them over."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import MISSING, asdict, dataclass, fields
from datetime import datetime
from enum import StrEnum
from typing import Any, ClassVar, TypeVar

__all__ = ["IngestJob", "Job", "JobRow", "JobStatus", "NodeJob", "claimed", "job_from_row"]


class JobStatus(StrEnum):
    """A job's status; the values are the `status` CHECK constraint of `workflow_node_jobs` (tests/test_job_rows.py)."""

    SCHEDULED = "scheduled"
    QUEUED = "queued"
    RUNNING = "running"
    AWAITING_INPUT = "awaiting_input"  # DAG input steps only
    WAITING = "waiting"  # DAG nodes the orchestrator holds: a map parent, a sleep, an event wait, a child run
    COMPLETED = "completed"
    FAILED = "failed"
    CANCELLED = "cancelled"
    SKIPPED = "skipped"  # DAG nodes only

    @property
    def terminal(self) -> bool:
        return self in _TERMINAL


_TERMINAL = frozenset({JobStatus.COMPLETED, JobStatus.FAILED, JobStatus.CANCELLED, JobStatus.SKIPPED})

R = TypeVar("R", bound="JobRow")


@dataclass(frozen=True, slots=True, kw_only=True)
class JobRow:
    """The columns both job tables share; a claim returns the whole row (`RETURNING j.*`)."""

    id: int
    queue: str
    status: JobStatus
    priority: int
    attempts: int
    max_attempts: int
    error: str | None = None
    claimed_by: str | None = None
    claim_lock_key: int | None = None
    lease_expires_at: datetime | None = None
    run_after: datetime | None = None
    created_at: datetime | None = None
    updated_at: datetime | None = None
    started_at: datetime | None = None
    finished_at: datetime | None = None
    watchdog_trips: int = 0
    batch_suspect: bool = False
    concurrency_key: str | None = None  # its key under a flow limit (docs/flow_control.md)
    flow_scope: str | None = None  # the limit it was admitted under, stamped by the claim
    flow_key: str | None = None  # the key it was admitted under
    tenant: str = "default"  # whose job it is, for fair share (docs/flow_control.md)
    oom_requeued: bool = False  # a GPU out-of-memory already requeued it once, uncharged (docs/gpu.md)
    trace_context: dict[str, Any] | None = None  # the W3C context of the span that enqueued it (docs/tracing.md)

    table: ClassVar[str]

    @classmethod
    def from_row(cls: type[R], row: Mapping[str, Any]) -> R:
        """Build from a database row (the usage figures, written when the job ends, are left out); a missing column is an error."""
        known, required = _columns(cls)
        missing = sorted(required - row.keys())
        if missing:
            raise ValueError(f"a {cls.table} row needs column(s) {', '.join(missing)}; got {', '.join(sorted(row.keys()))}")
        values = {name: row[name] for name in known if name in row}
        values["status"] = JobStatus(values["status"])
        return cls(**values)

    def as_dict(self) -> dict[str, Any]:
        """The row as a plain mapping, for hooks and output whose documented shape is a dict."""
        return asdict(self)


_COLUMNS: dict[type, tuple[frozenset[str], frozenset[str]]] = {}


def _columns(cls: type) -> tuple[frozenset[str], frozenset[str]]:
    """A row type's fields and its required ones, read once: `fields()` cost a claimed job more than its task."""
    if (found := _COLUMNS.get(cls)) is None:
        found = _COLUMNS[cls] = (frozenset(f.name for f in fields(cls)),
                                 frozenset(f.name for f in fields(cls) if f.default is MISSING and f.default_factory is MISSING))
    return found


@dataclass(frozen=True, slots=True, kw_only=True)
class IngestJob(JobRow):
    """A row of `ingest_jobs`: a registered task called with `(reason, args)`."""

    task_name: str
    args: dict[str, Any]
    reason: str
    result: Any = None
    dedup_key: str | None = None

    table: ClassVar[str] = "ingest_jobs"


@dataclass(frozen=True, slots=True, kw_only=True)
class NodeJob(JobRow):
    """A row of `workflow_node_jobs`: a DAG node (with `run_id`) or a plain node job, on `cpu` or `gpu`."""

    node_name: str
    inputs: dict[str, Any]
    node_module: str | None = None
    run_id: int | None = None
    input_refs: dict[str, Any] | None = None  # inputs left as references at enqueue, resolved when the node runs
    required_model: str | None = None
    budget_seconds: float | None = None
    retry_policy: dict[str, Any] | None = None  # timeout, retry_backoff, retry_on, no_retry_on (common/retry_policy.py)
    context_delta: dict[str, Any] | None = None
    unassignable_reason: str | None = None
    wake_at: datetime | None = None  # a sleep's deadline or an event wait's timeout (dag/timers.py); never on a claimed row
    event_key: str | None = None  # what an event wait waits for
    map_node: str | None = None  # on a map's item: the map it belongs to (dag/map.py)
    map_index: int | None = None  # ... and its place in the map's list
    map_total: int | None = None  # on a map's own row: the length of its list
    vram_gb: float | None = None  # working memory the job declares beyond its model's (gpu/claim.sql, qw_gpu_job_need_gb)
    gpus: int = 1  # devices it needs at once, on one host
    gpu_devices: list[str] | None = None  # the devices its claim reserved on (UUIDs) ...
    vram_reserved_gb: float | None = None  # ... and how much on each: held while the row is running

    table: ClassVar[str] = "workflow_node_jobs"


Job = IngestJob | NodeJob


def job_from_row(row: Mapping[str, Any]) -> Job:
    """The row as its family's type: an ingest job has a `task_name`, a node job a `node_name`."""
    return IngestJob.from_row(row) if "task_name" in row else NodeJob.from_row(row)


def claimed(row: Mapping[str, Any] | None) -> Job | None:
    """A claim's row (None: nothing claimed) as its typed job."""
    return None if row is None else job_from_row(row)
