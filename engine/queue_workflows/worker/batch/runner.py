"""Running a claimed batch: one after another, on a small thread pool, or on an event loop.

A runner only calls the job code (through the executor) and collects outcomes in claim order;
it never touches the database itself (a DAG node's run aside, read before its executor runs).
`start(job)` comes first for each job and returns the row as started (its attempt charged),
or None to refuse it; `finish(started, outcome)` comes as each job returns.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Literal

from queue_workflows.common import tracing
from queue_workflows.dag.execute import load_context
from queue_workflows.jobrow import IngestJob, Job
from queue_workflows.worker.executor import Outcome, run_ingest_job, run_ingest_job_async, run_node_job

Mode = Literal["sequential", "threads", "async"]
MODES: tuple[Mode, ...] = ("sequential", "threads", "async")
Start = Callable[[Job], Job | None]
Finish = Callable[[Job, Outcome], None]
Ran = tuple[Job, Outcome]  # the row as it started, and how it ended


class BatchRunner:
    def __init__(self, *, node_jobs: bool, mode: Mode = "sequential", concurrency: int = 1) -> None:
        if mode not in MODES:
            raise ValueError(f"batch mode must be one of {', '.join(MODES)}, not {mode!r}")
        if mode == "async" and node_jobs:
            raise ValueError("async batches run ingest tasks (async def); DAG node jobs use 'sequential' or 'threads'")
        if concurrency < 1:
            raise ValueError(f"concurrency must be at least 1, not {concurrency}")
        self.node_jobs = node_jobs
        self.mode = mode
        self.concurrency = concurrency
        self._pool = ThreadPoolExecutor(concurrency, thread_name_prefix="qw-batch") if mode == "threads" else None
        self._loop: asyncio.AbstractEventLoop | None = None
        self.span: Callable[[Job], Any] = lambda job: tracing.NO_SPAN  # around each job's run (the worker's tracing.run_span)

    def run(self, jobs: Sequence[Job], *, start: Start, finish: Finish, stop: threading.Event) -> list[Ran | None]:
        """Each job as it started and its outcome, in order; None for a job not started (`stop` was set first, or `start` refused it)."""
        if self.mode == "threads":
            return self._threads(jobs, start, finish, stop)
        if self.mode == "async":
            return self._async(jobs, start, finish, stop)
        return [self._one(job, start, finish, stop) for job in jobs]

    def _one(self, job: Job, start: Start, finish: Finish, stop: threading.Event) -> Ran | None:
        if stop.is_set() or (started := start(job)) is None:
            return None
        with self.span(started) as span:
            outcome = run_ingest_job(started) if isinstance(started, IngestJob) else run_node_job(started, load_context(started))
            span.outcome(outcome.status, outcome.error, outcome.exception)
        finish(started, outcome)
        return started, outcome

    def _threads(self, jobs: Sequence[Job], start: Start, finish: Finish, stop: threading.Event) -> list[Ran | None]:
        assert self._pool is not None
        return list(self._pool.map(lambda job: self._one(job, start, finish, stop), jobs))

    def _async(self, jobs: Sequence[Job], start: Start, finish: Finish, stop: threading.Event) -> list[Ran | None]:
        if self._loop is None:
            self._loop = asyncio.new_event_loop()
        return self._loop.run_until_complete(self._gather(jobs, start, finish, stop))

    async def _gather(self, jobs: Sequence[Job], start: Start, finish: Finish, stop: threading.Event) -> list[Ran | None]:
        gate = asyncio.Semaphore(self.concurrency)

        async def one(job: Job) -> Ran | None:
            async with gate:
                if stop.is_set() or (started := start(job)) is None:  # a start record is one short round trip: it may block the loop
                    return None
                assert isinstance(started, IngestJob)  # async batches are refused for node jobs (__init__)
                with self.span(started) as span:
                    outcome = await run_ingest_job_async(started)
                    span.outcome(outcome.status, outcome.error, outcome.exception)
                finish(started, outcome)
                return started, outcome

        return list(await asyncio.gather(*(one(job) for job in jobs)))

    def close(self) -> None:
        if self._pool is not None:
            self._pool.shutdown(wait=False, cancel_futures=True)
        if self._loop is not None:
            self._loop.close()
