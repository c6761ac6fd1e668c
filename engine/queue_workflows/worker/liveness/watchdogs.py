"""The per-job watchdogs, as pure decisions on an injectable clock.

A running job is stopped (the process exits; its code is never interrupted) when:
- its wall-clock budget is spent (exit 75), or a DAG node's own `timeout` (exit 75 too, but
  written as a failed attempt that its retry policy judges: see `Timeout`);
- it reported progress once and then went quiet for `stall_seconds` (exit 76): inert until
  the first beat, so a long cold model load is never policed;
- its lease can no longer be kept (exit 77, see beat.py).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from queue_workflows.jobrow import IngestJob, Job
from queue_workflows.worker.exits import EXIT_BUDGET, EXIT_STALLED


@dataclass(frozen=True)
class Timeout:
    """A node's own per-attempt timeout, with what its trip writes, decided when the attempt starts (worker/retry.py).

    Unlike a budget trip (requeued uncharged, up to QW_WATCHDOG_MAX_TRIPS), it is the node's
    failure: the attempt stays charged and is retried after `retry_in` seconds, or (None) fails.
    """

    seconds: float
    retry_in: float | None
    error: str
    job_id: int  # the row it is for: in a threads batch, one of several running


@dataclass(frozen=True)
class Trip:
    code: int
    reason: str
    timeout: Timeout | None = None  # set when a node's own timeout tripped


def budget_for(job: Job, settings: Any) -> float:
    """Wall-clock seconds a job may run: a DAG node's own budget, else per ingest queue, per node, tighter for video models."""
    if isinstance(job, IngestJob):
        return float(settings.ingest_default_budget_s)
    if job.budget_seconds:
        return float(job.budget_seconds)
    if job.required_model and job.required_model in settings.video_model_ids:
        return float(settings.video_budget_s)
    return float(settings.node_default_budget_s)


class JobWatch:
    """Budget and stall deadlines of the one job a worker runs; `check()` says whether to trip."""

    def __init__(self, *, stall_seconds: float, now_fn: Callable[[], float] = time.monotonic) -> None:
        self.stall_seconds = stall_seconds
        self.now_fn = now_fn
        self._lock = threading.Lock()
        self._job_id: int | None = None
        self._budget_deadline = float("inf")
        self._budget = 0.0
        self._timeout: Timeout | None = None
        self._last_beat: float | None = None
        self.beats = 0

    def start(self, job_id: int, budget_seconds: float, timeout: Timeout | None = None) -> None:
        """Arm the watchdogs for `job_id`: its `timeout`, when it has one, stands in for the budget."""
        with self._lock:
            self._job_id = job_id
            self._timeout = timeout
            self._budget = timeout.seconds if timeout is not None else budget_seconds
            self._budget_deadline = self.now_fn() + self._budget
            self._last_beat = None
            self.beats = 0

    def finish(self) -> None:
        with self._lock:
            self._job_id = None
            self._timeout = None
            self._budget_deadline = float("inf")
            self._last_beat = None

    def beat(self) -> None:
        """The job reports progress: arms the stall watchdog, and keeps it from tripping."""
        with self._lock:
            if self._job_id is not None:
                self._last_beat = self.now_fn()
                self.beats += 1

    def check(self) -> Trip | None:
        with self._lock:
            if self._job_id is None:
                return None
            now = self.now_fn()
            if now >= self._budget_deadline and self._timeout is not None:
                return Trip(EXIT_BUDGET, f"node timeout of {self._budget:g}s spent", self._timeout)
            if now >= self._budget_deadline:
                return Trip(EXIT_BUDGET, f"wall-clock budget of {self._budget:g}s spent")
            if self._last_beat is not None and now - self._last_beat >= self.stall_seconds:
                return Trip(EXIT_STALLED, f"no progress for {now - self._last_beat:.0f}s (stall timeout {self.stall_seconds:g}s)")
            return None
