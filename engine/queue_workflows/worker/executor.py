"""Run one claimed job's code and say how it ended; no database access here (a DAG node's run is loaded before)."""

from __future__ import annotations

import asyncio
import contextlib
import inspect
import logging
import traceback
from collections.abc import Awaitable
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any, Literal

from queue_workflows import callables, config, tasks
from queue_workflows.common import logjson, tracing
from queue_workflows.common.retry_policy import exception_names
from queue_workflows.errors import InvalidPayloadError, QueueWorkflowsError
from queue_workflows.gpu.errors import GpuErrorKind, classify, output_tail
from queue_workflows.jobrow import IngestJob, Job, JobStatus, NodeJob
from queue_workflows.payloads import clean_text, json_object

if TYPE_CHECKING:
    from queue_workflows.dag.execute import RunContext

log = logging.getLogger(__name__)

_MAX_ERROR_CHARS = 4000


@dataclass(frozen=True)
class Outcome:
    status: Literal[JobStatus.COMPLETED, JobStatus.FAILED]
    result: Any = None
    error: str | None = None
    gpu_error: GpuErrorKind | None = None  # a transient GPU error: requeued, not charged to the task
    exception: tuple[str, ...] = ()  # the raised class and its bases (retry_policy.exception_names), for retry_on / no_retry_on


def _failure(exc: BaseException) -> Outcome:
    """The attempt's error text, cleaned so the terminal write cannot be refused."""
    try:
        if isinstance(exc, QueueWorkflowsError):
            text = f"{type(exc).__name__}: {exc}"
        else:
            text = "".join(traceback.format_exception(exc)).strip()  # ends "SystemExit: 0", "KeyboardInterrupt", ...
            if printed := output_tail(exc):  # a child process's last words, e.g. "CUDA out of memory"
                text = f"{text}\n--- its output ended ---\n{printed}"
    except BaseException:  # noqa: BLE001 - a __str__ that raises must not take the worker down either
        text = f"{type(exc).__qualname__} (its message could not be formatted)"
    return Outcome(JobStatus.FAILED, error=clean_text(text)[-_MAX_ERROR_CHARS:], gpu_error=classify(exc), exception=exception_names(type(exc)))


def oom_outcome(job: Job, outcome: Outcome) -> Outcome:
    """A GPU out-of-memory requeues its job once (gpu/learn.py); a second one is the attempt's failure, its retry policy deciding."""
    if not job.oom_requeued:
        return outcome
    prefix = "GPU out of memory again after its one uncharged requeue (this attempt is charged): "
    return replace(outcome, error=prefix + (outcome.error or "")[-(_MAX_ERROR_CHARS - len(prefix)):], gpu_error=None)


def _checked_result(value: Any, what: str) -> Any:
    if value is not None and not isinstance(value, dict):
        raise InvalidPayloadError(f"{what} must return a dict (or None), not {type(value).__name__}")
    return json_object(value, what=f"{what} result", max_bytes=config.current().settings.max_payload_bytes, allow_none=True)


def job_log_fields(job: Job) -> contextlib.AbstractContextManager[None]:
    """What every log record the job's code (and the worker, about it) emits names: the job, its run, queue, host and trace."""
    return logjson.job_fields(job_id=job.id, run_id=getattr(job, "run_id", None), queue=job.queue, host=config.current().settings.host_label,
                              trace_id=tracing.job_trace_id(job))


def run_ingest_job(job: IngestJob) -> Outcome:
    """Call the job's task; an `async def` task is run to completion on an event loop of its own."""
    with job_log_fields(job):
        return _run_ingest_job(job)


def _run_ingest_job(job: IngestJob) -> Outcome:
    try:
        task = tasks.get_ingest_task(job.task_name)
        value = task(job.reason, dict(job.args or {}))
        if inspect.isawaitable(value):
            value = asyncio.run(_awaited(value))
        return Outcome(JobStatus.COMPLETED, result=_checked_result(value, f"task {task.name!r}"))
    except BaseException as exc:  # noqa: BLE001 - SystemExit & co. from task code too; signals never raise here
        return _failure(exc)


async def run_ingest_job_async(job: IngestJob) -> Outcome:
    """The same on the caller's event loop, so a batch of `async def` tasks runs concurrently (each in its own task's context)."""
    with job_log_fields(job):
        return await _run_ingest_job_async(job)


async def _run_ingest_job_async(job: IngestJob) -> Outcome:
    try:
        task = tasks.get_ingest_task(job.task_name)
        value = task(job.reason, dict(job.args or {}))
        if inspect.isawaitable(value):
            value = await value
        return Outcome(JobStatus.COMPLETED, result=_checked_result(value, f"task {task.name!r}"))
    except BaseException as exc:  # noqa: BLE001
        return _failure(exc)


async def _awaited(value: Awaitable[Any]) -> Any:
    return await value


def run_node_job(job: NodeJob, context: RunContext | None = None) -> Outcome:
    """Call the node's (allowed) callable; its dict return is the context delta.

    A DAG node that reads its run gets it as `context` (`dag.execute.load_context`, called by the worker).
    """
    with job_log_fields(job):
        return _run_node_job(job, context)


def _run_node_job(job: NodeJob, context: RunContext | None) -> Outcome:
    try:
        if job.input_refs is not None:  # a node of a DAG run: its callable, inputs by name
            from queue_workflows.dag.execute import invoke

            value = invoke(job, context)
        else:
            run = callables.plain_node_callable(job.node_module or job.node_name)  # refused before any import
            value = run(dict(job.inputs or {}))
        return Outcome(JobStatus.COMPLETED, result=_checked_result(value, f"node {job.node_name!r}"))
    except BaseException as exc:  # noqa: BLE001 - as in run_ingest_job
        return _failure(exc)
