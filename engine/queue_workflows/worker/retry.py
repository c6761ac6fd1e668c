"""What a failed attempt writes, in both worker modes and for a node's timeout: its retry policy decides retry-or-fail."""

from __future__ import annotations

from typing import Any

from queue_workflows import jobstore
from queue_workflows.common.retry_policy import Decision, decide, exception_names, timeout_of
from queue_workflows.errors import NodeTimeout
from queue_workflows.jobrow import Job, JobStatus, NodeJob
from queue_workflows.queries import JobTable
from queue_workflows.worker.liveness.watchdogs import Timeout

TIMEOUT_NAMES = exception_names(NodeTimeout)


def policy_of(job: Job) -> dict[str, Any] | None:
    return job.retry_policy if isinstance(job, NodeJob) else None


def decision(job: Job, names: tuple[str, ...], settings: Any) -> Decision:
    """Retry-or-fail for the job's current (charged) attempt, which raised `names`."""
    return decide(policy_of(job), names, attempts=job.attempts, max_attempts=job.max_attempts,
                  base=settings.retry_base_seconds, cap=settings.retry_max_seconds)


def failure_statements(table: JobTable, job: Job, worker_id: str, *, error: str, verdict: Decision) -> list[jobstore.Statement]:
    """The retry (when decided) and the guarded failure mark, which then matches nothing."""
    statements = []
    if verdict.retry_in is not None:
        statements.append(jobstore.retry_statement(table, job.id, worker_id, error=error, delay_seconds=verdict.retry_in))
    statements.append(jobstore.mark_statement(table, JobStatus.FAILED, job.id, error=verdict.error(error), worker_id=worker_id))
    return statements


def timeout_for(job: Job, settings: Any) -> Timeout | None:
    """The node's own timeout for this attempt (`job.attempts` as charged), with its trip's write decided now; None without one."""
    seconds = timeout_of(policy_of(job))
    if seconds is None:
        return None
    verdict = decision(job, TIMEOUT_NAMES, settings)
    error = f"NodeTimeout: attempt {job.attempts} ran past its timeout of {seconds:g}s; the worker's watchdog ended it (exit 75)"
    return Timeout(seconds, verdict.retry_in, verdict.error(error), job.id)
