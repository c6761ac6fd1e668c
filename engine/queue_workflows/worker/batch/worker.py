"""The batch worker: for floods of small cpu/ingest jobs, claim up to N rows at once.

A `ClaimWorker` in every other respect (session, lock, liveness beat, ON/OFF, throttle, stop):
only the drain differs. One statement claims the batch, capped at this worker's share of the
queue, in claim order, leased but uncharged. A row's attempt is charged when it starts: by
the progress record (progress.py) that every 50 ms stores what finished and charges what
started, or, for a row the reclaim flagged suspect, by its own record before its code runs.
So a crash blames only rows that ran, and loses at most the last 50 ms of finished rows,
which go back uncharged (and suspect) rather than failing. The rest is written with the
next claim, in one durable transaction: successes in one statement, a failure through the
usual retry-or-fail pair, rows a stop left unstarted handed back. If the worker trips, the
beat stores what finished and hands back what never started (ledger.py). A gpu worker
never batches: it keeps concurrency 1.
"""

from __future__ import annotations

import logging
import math
import threading
from dataclasses import replace
from functools import cache, partial
from typing import Any

import psycopg
from psycopg import sql
from psycopg.rows import dict_row

from queue_workflows import db, jobstore, queries
from queue_workflows.common import sqlfile, tracing
from queue_workflows.common.text import first_line
from queue_workflows.errors import ConfigError
from queue_workflows.jobrow import JobStatus, job_from_row
from queue_workflows.payloads import clean_text
from queue_workflows.queries import JobTable
from queue_workflows.worker import retry
from queue_workflows.worker.batch.ledger import BatchLedger
from queue_workflows.worker.batch.progress import ProgressWriter
from queue_workflows.worker.batch.runner import BatchRunner, Job, Mode
from queue_workflows.worker.claim import ClaimWorker
from queue_workflows.worker.executor import Outcome
from queue_workflows.worker.liveness.watchdogs import budget_for

_BATCH = sqlfile.load("queue_workflows.worker.batch", "batch.sql")
_JOBS = sqlfile.load("queue_workflows", "jobs.sql")

log = logging.getLogger(__name__)

MAX_BATCH = 1000


@cache
def claim_batch_query(table: JobTable, claim_order: str) -> sql.Composed:
    """`claim_batch`, ordered like the one-job claim (fixed fragments only; no model affinity: no gpu here)."""
    order = sql.SQL(", ").join([queries.PRIORITY_ORDER[claim_order], queries.CREATED_ORDER])
    return sql.SQL(_BATCH["claim_batch"]).format(table=sql.Identifier(table), order_by=order, clear_unassignable=sqlfile.clear_unassignable(table),
                                                 **queries.fair_fragments(table, claim_order))


class BatchWorker(ClaimWorker):
    def __init__(
        self,
        queue: str,
        *,
        batch_size: int,
        mode: Mode = "sequential",
        concurrency: int = 1,
        max_jobs: int | None = None,
    ) -> None:
        if queue == "gpu":
            raise ConfigError("a gpu worker runs one job at a time: batch mode is for the cpu and ingest queues")
        if not 1 <= batch_size <= MAX_BATCH:
            raise ConfigError(f"--batch must be between 1 and {MAX_BATCH}, not {batch_size}")
        super().__init__(queue, max_jobs=max_jobs)
        self.batch_size = batch_size
        try:
            self.runner = BatchRunner(node_jobs=self.is_node_queue, mode=mode, concurrency=concurrency)
        except ValueError as exc:
            raise ConfigError(str(exc)) from None
        self.runner.span = lambda job: tracing.run_span(job, self.worker_id, self.settings.host_label, self._claim_span, linked=True)
        self._batch: list[Job] = []
        self._ledger: BatchLedger | None = None
        self._claim_sent_at: float | None = None
        # One record of the batch's progress at a time: no two transactions update its rows in different orders.
        self._write_lock = threading.RLock()
        self.progress = ProgressWriter(url=self.url, current=lambda: self._ledger, write_lock=self._write_lock)

    def drain(self) -> int:
        """Claim, run and store batches until the queue is empty (or we are told to stop)."""
        ran = 0
        jobs = self.session.run(self._claim_batch) if self._may_claim() else []
        while jobs:
            outcomes = self._run_batch(jobs)
            ran += sum(o is not None for o in outcomes)
            jobs = self.session.run(partial(self._store_batch, jobs=jobs, ran=outcomes))
        return ran

    def _limit(self) -> int:
        if self.max_jobs is None:
            return self.batch_size
        return max(1, min(self.batch_size, self.max_jobs - self.jobs_done))

    def _claim_statement_batch(self) -> jobstore.Statement:
        params = {"queue": self.queue, "worker_id": self.worker_id, "lock_key": self.session.lock_key or 0,
                  "lease_seconds": self.settings.lease_seconds, "limit": self._limit(),
                  "aging_seconds": self.settings.claim_aging_seconds}
        return claim_batch_query(self.table, self.settings.claim_order), params

    def _claim_batch(self, conn: Any) -> list[Job]:
        self._claim_sent_at = self.beat.now_fn()  # the batch's lease counts from here (LivenessBeat.job_started)
        self._claim_ns = tracing.clock()
        with conn.cursor(row_factory=dict_row) as cur:
            rows = cur.execute(*self._claim_statement_batch()).fetchall()
            if not rows and jobstore.promote_due(conn, self.table, self.queue):
                rows = cur.execute(*self._claim_statement_batch()).fetchall()
        if rows and self.baton is not None:
            self.baton.release(conn)  # busy now: enqueues stop announcing to us, and the next in line listens
        return [job_from_row(row) for row in rows]

    def _budget(self, job: Job) -> float:
        return budget_for(job, self.settings)

    def _run_batch(self, jobs: list[Job]) -> list[tuple[Job, Outcome] | None]:
        self._batch, self._job = jobs, jobs[0]
        # One claim span for the batch, linked to each job's trace; each run is a span of its job's own trace.
        self._claim_span = tracing.batch_claim_span(jobs, self._claim_ns, self.worker_id, self.settings.host_label)
        self._ledger = BatchLedger(jobs, self._outcome_statements, self._charge_statement)
        if not self.progress.is_alive():
            self.progress.start()
        ids = tuple(j.id for j in jobs)
        if self.runner.mode == "sequential":
            budget = self._budget(jobs[0])  # the watchdogs then follow each job as it starts
        else:  # concurrent: the batch as a whole, at its slowest job's pace
            budget = max(map(self._budget, jobs)) * math.ceil(len(jobs) / self.runner.concurrency)
        self.beat.job_started(self.table, ids[0], budget, batch=ids, rows=self._ledger, claimed_at=self._claim_sent_at)
        outcomes = self.runner.run(jobs, start=self._start_row, finish=self._row_finished, stop=self.stop_event)
        self.jobs_done += sum(o is not None for o in outcomes)
        return outcomes

    def _start_row(self, job: Job) -> Job | None:
        """A row starts: charged by the next progress record, or, if suspect, by its own record before its code runs.

        The row as started, with the attempt it is charged (None: it does not run).
        """
        ledger = self._ledger
        if ledger is None:
            return None
        self._settle(ledger)
        if not ledger.start(job.id):
            return None
        if job.batch_suspect:
            attempts = self.session.run(partial(self._record_start, ledger=ledger, job_id=job.id))
            if attempts is None:
                ledger.not_ours(job.id)
                return None
            started = replace(job, attempts=attempts)
        else:
            started = replace(job, attempts=job.attempts + 1)  # what its record will charge (claimed rows are uncharged)
        timeout = retry.timeout_for(started, self.settings)
        if self.runner.mode == "sequential":
            self._job = started
            self.beat.job_advanced(job.id, self._budget(job), timeout=timeout)
        elif timeout is not None:  # rows run side by side: the guard watches each one's own deadline
            ledger.arm(timeout, self.beat.now_fn())
        return started

    def _row_finished(self, job: Job, outcome: Outcome) -> None:
        if self.runner.mode == "sequential":
            self.watch.finish()  # its code returned: no watchdog may trip on it now
        ledger = self._ledger
        if ledger is None:
            return
        ledger.finish(job, outcome)
        self._settle(ledger)

    def _settle(self, ledger: BatchLedger) -> None:
        """A row on record as started that has finished is recorded at once; others wait for the next record."""
        try:
            self.progress.settle(ledger)
        except psycopg.Error as exc:
            log.warning("batch progress not recorded yet (%s); the next record tries again", first_line(exc))

    def _record_start(self, conn: Any, ledger: BatchLedger, job_id: int) -> int | None:
        """The batch's progress and this row's start, one round trip not waiting for the disk: its attempt, or None if not ours."""
        start = (_BATCH.sql("start_batch_row", self.table), {"job_id": job_id, "worker_id": self.worker_id})
        with self._write_lock:  # taken inside the session's own lock, as _store_batch does
            progress = ledger.progress()
            try:
                row = db.one_round_trip(conn, [*ledger.statements(progress), start])[-1].fetchone()
            except psycopg.OperationalError:
                raise
            except Exception as exc:  # noqa: BLE001 - one bad outcome must not cost the row about to start
                log.error("batch write refused (%s); storing its %d finished jobs one by one", first_line(exc), len(progress.finished))
                self._store_progress_alone(conn, ledger)
                row = conn.execute(*start).fetchone()
            ledger.recorded(progress)
        return None if row is None else int(row["attempts"])

    def _charge_statement(self, ids: list[int]) -> jobstore.Statement:
        return _BATCH.sql("charge_batch_rows", self.table), {"ids": ids, "worker_id": self.worker_id}

    def _store_progress_alone(self, conn: Any, ledger: BatchLedger) -> None:
        """After a refused write: the charges, then each finished row on its own."""
        progress = ledger.progress()
        if progress.uncharged:
            db.one_round_trip(conn, [self._charge_statement(progress.uncharged)])
        for job, outcome in progress.finished:
            self._store_alone(conn, job, outcome)
        ledger.recorded(progress)

    def _store_batch(self, conn: Any, jobs: list[Job], ran: list[tuple[Job, Outcome] | None]) -> list[Job]:
        """The batch's last outcomes and the next claim, one (durable) transaction; a refused write is retried job by job.

        The beat keeps the batch until this commits: a trip meanwhile stores the same outcomes
        itself (the writes are fenced, so whichever commits second matches nothing), and the
        rows this commit releases are unstarted ones, whose loss never stops the worker.
        """
        ledger = self._ledger
        assert ledger is not None
        unstarted = [j for j, r in zip(jobs, ran, strict=True) if r is None]
        with self._write_lock:
            progress = ledger.progress()
            try:
                statements = [*ledger.statements(progress), *self._outcome_statements(unstarted, [None] * len(unstarted))]
                claim_next = self._may_claim()
                if claim_next:
                    statements.append(self._claim_statement_batch())
                    self._claim_sent_at, self._claim_ns = self.beat.now_fn(), tracing.clock()
                cursors = db.one_round_trip(conn, statements)
                next_jobs = [job_from_row(row) for row in cursors[-1].fetchall()] if claim_next else []
            except psycopg.OperationalError:
                raise
            except Exception as exc:  # noqa: BLE001 - one bad outcome must not cost the batch or the worker
                log.error("batch write refused (%s); storing its %d jobs one by one", first_line(exc), len(progress.finished))
                self._store_progress_alone(conn, ledger)
                for job in unstarted:
                    self._store_alone(conn, job, None)
                next_jobs = self._claim_batch(conn) if self._may_claim() else []
            ledger.recorded(progress)
        self.beat.job_finished()
        self._batch, self._job, self._ledger = [], None, None
        self._report_batch(ran)
        return next_jobs

    def _outcome_statements(self, jobs: list[Job], outcomes: list[Outcome | None]) -> list[jobstore.Statement]:
        """Successes in one statement, unstarted rows handed back in one, each failure as retry-or-fail."""
        statements: list[jobstore.Statement] = []
        done = [(j.id, o.result) for j, o in zip(jobs, outcomes, strict=True) if o is not None and o.status == JobStatus.COMPLETED]
        unstarted = [j.id for j, o in zip(jobs, outcomes, strict=True) if o is None]
        if done:
            ids, results = zip(*done, strict=True)
            statements.append((_BATCH.sql("complete_batch", self.table),
                               {"ids": list(ids), "results": list(results), "worker_id": self.worker_id}))
        if unstarted:
            statements.append((_JOBS.sql("release_job", self.table), {"ids": unstarted, "worker_id": self.worker_id}))
        for job, outcome in zip(jobs, outcomes, strict=True):
            if outcome is not None and outcome.status == JobStatus.FAILED:
                statements.extend(self._failure_statements(job, outcome.error or "", outcome.exception))
        return statements

    def _failure_statements(self, job: Job, error: str, exception: tuple[str, ...] = ()) -> list[jobstore.Statement]:
        """Retry after a backoff when its retry policy says so (the mark then matches nothing), else fail saying why."""
        verdict = retry.decision(job, exception, self.settings)
        return retry.failure_statements(self.table, job, self.worker_id, error=error, verdict=verdict)

    def _store_alone(self, conn: Any, job: Job, outcome: Outcome | None) -> None:
        try:
            db.one_round_trip(conn, self._outcome_statements([job], [outcome]))
        except psycopg.OperationalError:
            raise
        except Exception as exc:  # noqa: BLE001
            error = clean_text(f"the job's outcome could not be stored: {type(exc).__name__}: {first_line(exc)}")
            try:
                db.one_round_trip(conn, self._failure_statements(job, error))
            except psycopg.OperationalError:
                raise
            except Exception:  # noqa: BLE001 - left running without a renewer: its lease returns it
                log.exception("job %s: not even its failure could be stored; its lease will return it", job.id)

    def _report_batch(self, ran: list[tuple[Job, Outcome] | None]) -> None:
        for started, outcome in filter(None, ran):
            if outcome.status == JobStatus.FAILED:
                last = (outcome.error or "").strip().splitlines()[-1:] or [""]
                log.warning("job %s attempt %s failed: %s", started.id, started.attempts, last[0])
        if log.isEnabledFor(logging.DEBUG):
            log.debug("batch of %d stored (%d not started, handed back)", len(ran), sum(r is None for r in ran))

    def _abandon(self, job_id: int) -> None:
        """Grace ran out mid-batch: what finished is stored, the rest goes back uncharged, then the process leaves."""
        ledger = self._ledger
        if ledger is not None:
            self.beat.job_finished()  # the release below revokes rows: that must not read as a takeover
            recorded, running, unstarted = ledger.close()
            try:
                with db.connect(autocommit=True, url=self.url) as conn, conn.transaction():
                    for statement in recorded:
                        conn.execute(*statement)
                    jobstore.release(conn, self.table, [*running, *unstarted], self.worker_id)
            except psycopg.Error as exc:
                log.warning("batch rows not stored or handed back (%s); their leases will return them", first_line(exc))
        super()._abandon(job_id)

    def _shutdown(self) -> None:
        self.progress.stop()
        super()._shutdown()
        self.runner.close()
