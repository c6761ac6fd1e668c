"""Queue operations: enqueue, claim, terminal marks and snapshots for both job families.

Node jobs (DAG, queues ``cpu``/``gpu``) live in ``workflow_node_jobs``; ingest jobs
(host-defined queues) in ``ingest_jobs``. Every enqueue takes an optional caller
connection so the row and its NOTIFY commit with the caller's own writes.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from psycopg.rows import dict_row
from psycopg.types.json import Jsonb

from queue_workflows import callables, config, db, jobstore, tasks
from queue_workflows.common import retry_policy, sqlfile, tracing
from queue_workflows.dag import hooks
from queue_workflows.errors import InvalidNameError, InvalidPayloadError, QueueWorkflowsError, ReservedQueueError, UnknownQueueError
from queue_workflows.fair.tenants import DEFAULT_TENANT, check_tenant
from queue_workflows.jobrow import JobStatus
from queue_workflows.jobstore import Claimant, Row
from queue_workflows.payloads import check_gpus, check_text, check_vram_gb, clean_text, json_object, shown
from queue_workflows.queries import JobTable
from queue_workflows.settings import QUEUE_NAME_RE, RESERVED_QUEUES

_GPU = sqlfile.load("queue_workflows.gpu", "claim.sql")
_JOBS = sqlfile.load("queue_workflows", "jobs.sql")

NODE_TABLE: JobTable = "workflow_node_jobs"
INGEST_TABLE: JobTable = "ingest_jobs"
NODE_QUEUES = RESERVED_QUEUES
_NODE_NAME_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_.:-]{0,127}$")
_PRIORITY_RANGE = (-(2**31), 2**31 - 1)
_BIGINT_MAX = 2**63 - 1
_INGEST_ARGS = ("task_name", "queue", "args", "reason", "priority", "max_attempts", "concurrency_key", "tenant")

__all__ = [
    "Claimant",
    "check_ingest_queue",
    "claim_ingest_job",
    "claim_node_job",
    "enqueue_ingest_job",
    "enqueue_ingest_jobs",
    "enqueue_node_job",
    "ingest_snapshot",
    "mark_completed",
    "mark_failed",
    "mark_ingest_completed",
    "mark_ingest_failed",
    "snapshot",
]


def check_ingest_queue(queue: object) -> str:
    if not isinstance(queue, str) or not QUEUE_NAME_RE.match(queue):
        raise InvalidNameError(f"queue name {shown(queue)} is invalid: lowercase letters, digits and _, max 32")
    if queue in RESERVED_QUEUES:
        raise ReservedQueueError(f"queue {queue!r} is reserved for DAG node jobs; ingest jobs use one of the configured ingest queues")
    known = config.current().settings.ingest_queues
    if queue not in known:
        raise UnknownQueueError(f"unknown ingest queue {queue!r} (configured: {', '.join(sorted(known))}; see QW_INGEST_QUEUES)")
    return queue


def check_node_queue(queue: object) -> str:
    if queue not in NODE_QUEUES:
        raise UnknownQueueError(f"unknown node queue {shown(queue)}: node jobs run on 'cpu' or 'gpu'")
    return queue


def _check_priority(priority: object) -> int:
    if isinstance(priority, bool) or not isinstance(priority, int) or not _PRIORITY_RANGE[0] <= priority <= _PRIORITY_RANGE[1]:
        raise InvalidPayloadError(f"priority must be a 32-bit integer, not {shown(priority)}")
    return priority


def _check_max_attempts(max_attempts: int | None) -> int:
    value = config.current().settings.max_attempts if max_attempts is None else max_attempts
    if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= 1000:
        raise InvalidPayloadError(f"max_attempts must be an integer from 1 to 1000, not {shown(value)}")
    return value


def _ingest_params(
    task_name: str,
    queue: str,
    args: dict[str, Any] | None = None,
    *,
    reason: str = "manual",
    priority: int = 0,
    max_attempts: int | None = None,
    concurrency_key: str | None = None,
    tenant: str = DEFAULT_TENANT,
) -> dict[str, Any]:
    """Validate one ingest job and return its bind parameters; raises before anything is written."""
    tasks.check_task_name(task_name)
    tasks.get_ingest_task(task_name)
    check_ingest_queue(queue)
    check_text(reason, what="reason", max_chars=200)
    return {
        "task_name": task_name,
        "queue": queue,
        "args": json_object(args, what="args", max_bytes=config.current().settings.max_payload_bytes),
        "reason": reason,
        "priority": _check_priority(priority),
        "max_attempts": _check_max_attempts(max_attempts),
        "concurrency_key": check_concurrency_key(concurrency_key),
        "tenant": check_tenant(tenant),
    }


def check_concurrency_key(key: object) -> str | None:
    """A job's concurrency key (docs/flow_control.md): None, or 1 to 200 characters Postgres can store."""
    return None if key is None else check_text(key, what="concurrency_key", max_chars=200)


def enqueue_ingest_job(
    task_name: str,
    queue: str,
    args: dict[str, Any] | None = None,
    *,
    reason: str = "manual",
    priority: int = 0,
    max_attempts: int | None = None,
    dedup_key: str | None = None,
    concurrency_key: str | None = None,
    tenant: str = DEFAULT_TENANT,
    conn: db.Conn | None = None,
) -> Row:
    """INSERT one ingest job; validated before the write, its NOTIFY (sent while a worker waits) rides the same transaction.

    `tenant` names whose work it is: within a queue, tenants are served by weight (docs/flow_control.md).
    With `dedup_key`, a job with that key that is live (or finished within
    `QW_DEDUP_WINDOW_SECONDS`) is returned instead of enqueueing another.
    """
    params = _ingest_params(task_name, queue, args, reason=reason, priority=priority, max_attempts=max_attempts,
                            concurrency_key=concurrency_key, tenant=tenant)
    if dedup_key is not None:
        params["dedup_key"] = check_text(dedup_key, what="dedup_key", max_chars=200)
        params["dedup_window_seconds"] = config.current().settings.dedup_window_seconds
    with tracing.enqueue_span("ingest", queue, task_name) as span:
        params["trace_context"] = span.column
        row = _insert_ingest(conn, params)
        span.job(row)
    if row is None:
        raise InvalidPayloadError(f"dedup_key {shown(dedup_key)}: could not settle which job holds it; enqueue again")
    return row


def _insert_ingest(conn: db.Conn | None, params: dict[str, Any]) -> Row | None:
    if "dedup_key" not in params:
        return jobstore.fetch_one(conn, (_JOBS.sql("enqueue_ingest_job"), params))
    with db.transaction(conn) as c:
        for _ in range(3):  # nothing back: we lost the race at the unique index; look again
            row = jobstore.fetch_one(c, (_JOBS.sql("enqueue_ingest_job_once"), params))
            if row is not None:
                return row
            row = jobstore.fetch_one(c, (_JOBS.sql("find_dedup_job"), params))
            if row is not None:
                return row
    return None


def enqueue_ingest_jobs(jobs: Iterable[Mapping[str, Any]], *, conn: db.Conn | None = None) -> list[Row]:
    """INSERT many ingest jobs in one statement, all or nothing.

    Each item takes `enqueue_ingest_job`'s arguments by name (`task_name`, `queue`, `args`,
    `reason`, `priority`, `max_attempts`, `tenant`); every item is validated before anything is written.
    """
    batch: dict[str, list[Any]] = {key: [] for key in _INGEST_ARGS}
    try:
        items = list(jobs)
    except TypeError:
        raise InvalidPayloadError(f"jobs must be an iterable of mappings, not {type(jobs).__name__}") from None
    for index, job in enumerate(items):
        for key, value in _bulk_item_params(index, job).items():
            batch[key].append(value)
    if not batch["task_name"]:
        return []
    with tracing.enqueue_span("ingest", ",".join(sorted(set(batch["queue"]))), None, count=len(batch["queue"])) as span, \
            db.transaction(conn) as c, c.cursor(row_factory=dict_row) as cur:
        rows = cur.execute(_JOBS.sql("enqueue_ingest_jobs"), {**batch, "trace_context": span.column}).fetchall()
    return sorted(rows, key=lambda row: row["id"])


def _bulk_item_params(index: int, job: object) -> dict[str, Any]:
    """`_ingest_params` for one batch item; every error names the item (and its task, when known)."""
    label = f"job #{index}"
    if not isinstance(job, Mapping):
        raise InvalidPayloadError(f"{label} must be a mapping of enqueue_ingest_job's arguments ({', '.join(_INGEST_ARGS)}), not {type(job).__name__}")
    name = job.get("task_name")
    task = f" [task {name!r}]" if isinstance(name, str) and tasks.TASK_NAME_RE.match(name) else ""
    unknown = [shown(key) for key in job if key not in _INGEST_ARGS]
    missing = [key for key in ("task_name", "queue") if key not in job]
    if unknown or missing:
        problem = f"unknown argument(s) {', '.join(unknown)}" if unknown else f"missing {' and '.join(missing)}"
        raise InvalidPayloadError(f"{label}: {problem}; an item takes {', '.join(_INGEST_ARGS)}{task}")
    try:
        return _ingest_params(**job)
    except QueueWorkflowsError as exc:
        message = str(exc)
        raise type(exc)(f"{label}: {message}{task if task and repr(name) not in message else ''}") from None


def enqueue_node_job(
    node_name: str,
    queue: str,
    *,
    run_id: int | None = None,
    node_module: str | None = None,
    inputs: dict[str, Any] | None = None,
    priority: int = 0,
    required_model: str | None = None,
    max_attempts: int | None = None,
    retry_policy: Mapping[str, Any] | None = None,
    concurrency_key: str | None = None,
    check_callable: bool = True,
    tenant: str = DEFAULT_TENANT,
    vram_gb: float | None = None,
    gpus: int = 1,
    conn: db.Conn | None = None,
) -> Row:
    """INSERT one DAG node job on `cpu` or `gpu`; its NOTIFY (sent while a worker waits) rides the same transaction.

    `vram_gb`: GPU memory the job needs beyond its model's, on each of its `gpus` devices (docs/gpu.md,
    "Several jobs per GPU").

    `tenant` is the job's (docs/flow_control.md); a job with a `run_id` takes its run's instead.
    `node_module` (else `node_name`) names a module exposing `run(inputs)` under the allowed
    packages, or a registered callable (callables.py); any other is refused before the write.
    `retry_policy` takes a DAG node's keys (`timeout`, `retry_backoff`, `retry_on`, `no_retry_on`).
    It is resolved (imported) here too, as `start_run` does, so a typo fails the enqueue, not
    every attempt: `UnresolvableCallableError`, nothing written. `check_callable=False` checks the
    name only, for an enqueuer that does not have the workers' code.
    """
    check_node_queue(queue)
    for label, value in (("node_name", node_name), ("node_module", node_module), ("required_model", required_model)):
        if value is None and label != "node_name":
            continue
        if not isinstance(value, str) or not _NODE_NAME_RE.match(value):
            raise InvalidNameError(f"{label} {shown(value)} is invalid: letters, digits and _ . : - (max 128)")
    if run_id is not None and (isinstance(run_id, bool) or not isinstance(run_id, int) or not 0 < run_id <= _BIGINT_MAX):
        raise InvalidPayloadError(f"run_id must be a positive 64-bit integer, not {shown(run_id)}")
    params = {
        "run_id": run_id,
        "node_name": node_name,
        "node_module": node_module,
        "queue": queue,
        "priority": _check_priority(priority),
        "required_model": required_model,
        "inputs": json_object(inputs, what="inputs", max_bytes=config.current().settings.max_payload_bytes),
        "max_attempts": _check_max_attempts(max_attempts),
        "retry_policy": _checked_policy(retry_policy),
        "concurrency_key": check_concurrency_key(concurrency_key),
        "tenant": check_tenant(tenant),
        "vram_gb": check_vram_gb(vram_gb),
        "gpus": check_gpus(gpus),
    }
    callables.check_plain_node(node_module or node_name)  # by name, importing nothing
    if check_callable:
        _check_resolvable(node_module or node_name)
    with tracing.enqueue_span("node", queue, node_module or node_name, run_id=run_id) as span:
        params["trace_context"] = span.column
        row = jobstore.fetch_one(conn, (_JOBS.sql("enqueue_node_job"), params))
        span.job(row)
    if row is None:  # the INSERT is conditional on the run: nothing written, the caller's transaction intact
        raise InvalidPayloadError(f"run_id {run_id} does not exist (no workflow_runs row visible to this transaction)")
    return row


def _checked_policy(policy: Any) -> Jsonb | None:
    try:
        checked = retry_policy.check(policy)
    except retry_policy.PolicyError as exc:
        raise InvalidPayloadError(str(exc)) from None
    return Jsonb(checked) if checked is not None else None


def _check_resolvable(call: str) -> None:
    try:
        hooks.resolve_callable(call)
    except callables.CallableNotAllowedError:
        raise
    except hooks.UnresolvableCallableError as exc:
        raise hooks.UnresolvableCallableError(f"node_module {call!r}: {exc} (check_callable=False skips this for code only the workers have)") from None
    except Exception as exc:  # noqa: BLE001 - importing host code may raise anything
        raise hooks.UnresolvableCallableError(f"node_module {call!r} cannot be imported: {type(exc).__name__}: {exc}") from None


def table_for(queue: object) -> JobTable:
    """The table a worker for `queue` claims from: node jobs for cpu/gpu, else a configured ingest queue."""
    if queue in NODE_QUEUES:
        return NODE_TABLE
    check_ingest_queue(queue)
    return INGEST_TABLE


def claim_statement(
    table: JobTable, queue: str, claimant: Claimant, *, current_model: str | None = None, loaded_models: Sequence[str] = (),
    vram_available_gb: float | None = None, gpu_devices: Mapping[str, Any] | None = None,
) -> jobstore.Statement:
    """The claim for `queue` in `table` under this host's settings; gpu claims prefer jobs for `current_model`."""
    if table == NODE_TABLE:
        check_node_queue(queue)
    else:
        check_ingest_queue(queue)
    settings = config.current().settings
    return jobstore.claim_statement(
        table,
        queue,
        claimant,
        lease_seconds=settings.lease_seconds,
        claim_order=settings.claim_order,
        current_model=current_model,
        with_affinity=queue == "gpu" and settings.gpu_routing == "affinity",
        loaded_models=loaded_models,
        vram_available_gb=vram_available_gb,
        second_copy_backlog=settings.gpu_second_copy_backlog,
        gang_hold_seconds=settings.gpu_gang_hold_seconds,
        aging_seconds=settings.claim_aging_seconds,
        gpu_devices=gpu_devices,
    )


def claim_prelude(queue: str) -> jobstore.Statement | None:
    """What a worker on `queue` runs before its claim, in the same transaction (None: nothing).

    Routed gpu claims take turns, so two idle workers never both pick the model neither yet
    holds; gpu jobs are long, so a turn costs nothing that matters.
    """
    settings = config.current().settings
    if queue != "gpu" or settings.gpu_routing != "affinity":
        return None
    return _GPU.sql("serialize_gpu_claims"), {"queue": queue}


def claim_statements(table: JobTable, queue: str, claimant: Claimant, **routing: Any) -> list[jobstore.Statement]:
    """The claim (`claim_statement`), after the queue's prelude when it has one: run them in one
    transaction; the last statement's row is the claimed job."""
    claim = claim_statement(table, queue, claimant, **routing)
    prelude = claim_prelude(queue)
    return [claim] if prelude is None else [prelude, claim]


def claim_node_job(
    queue: str, claimant: Claimant, *, current_model: str | None = None, conn: db.Conn | None = None
) -> Row | None:
    """Claim the next node job on `cpu` or `gpu`."""
    *prelude, claim = claim_statements(NODE_TABLE, queue, claimant, current_model=current_model)
    with db.transaction(conn) as c, c.transaction():
        for statement in prelude:
            c.execute(*statement)
        return jobstore.fetch_one(c, claim)


def claim_ingest_job(queue: str, claimant: Claimant, *, conn: db.Conn | None = None) -> Row | None:
    return jobstore.fetch_one(conn, claim_statement(INGEST_TABLE, queue, claimant))


def _result(value: Any, what: str) -> Any:
    return json_object(value, what=what, max_bytes=config.current().settings.max_payload_bytes, allow_none=True)


def mark_completed(job_id: int, context_delta: dict[str, Any] | None = None, *, worker_id: str | None = None, conn: db.Conn | None = None) -> Row | None:
    """Complete a node job; None when it is already terminal (or, with `worker_id`, no longer that worker's)."""
    payload = _result(context_delta, "context_delta")
    return jobstore.mark(NODE_TABLE, JobStatus.COMPLETED, job_id, result=payload, worker_id=worker_id, conn=conn)


def mark_failed(job_id: int, error: str, *, worker_id: str | None = None, conn: db.Conn | None = None) -> Row | None:
    return jobstore.mark(NODE_TABLE, JobStatus.FAILED, job_id, error=clean_text(str(error)), worker_id=worker_id, conn=conn)


def mark_ingest_completed(job_id: int, result: dict[str, Any] | None = None, *, worker_id: str | None = None, conn: db.Conn | None = None) -> Row | None:
    payload = _result(result, "result")
    return jobstore.mark(INGEST_TABLE, JobStatus.COMPLETED, job_id, result=payload, worker_id=worker_id, conn=conn)


def mark_ingest_failed(job_id: int, error: str, *, worker_id: str | None = None, conn: db.Conn | None = None) -> Row | None:
    return jobstore.mark(INGEST_TABLE, JobStatus.FAILED, job_id, error=clean_text(str(error)), worker_id=worker_id, conn=conn)


def _snapshot(table: str, queues: frozenset[str]) -> dict[str, Any]:
    settings = config.current().settings
    with db.transaction() as conn:
        counts = jobstore.queue_counts(conn, table, queues, stale_after_seconds=3 * settings.heartbeat_seconds)  # type: ignore[arg-type]
    return {"queues": counts}


def snapshot() -> dict[str, Any]:
    """`{"queues": {cpu|gpu: {queued, running, completed, failed, workers}}}`."""
    return _snapshot(NODE_TABLE, NODE_QUEUES)


def ingest_snapshot() -> dict[str, Any]:
    """The same shape for every configured ingest queue."""
    return _snapshot(INGEST_TABLE, config.current().settings.ingest_queues)
