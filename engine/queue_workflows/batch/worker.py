"""The batch worker: for floods of small cpu/ingest jobs, claim up to N rows at once.

A `ClaimWorker` in every other respect (session, lock, liveness beat, ON/OFF, throttle, stop):
only the drain differs. One statement claims the batch, capped at this worker's share of the
queue, in claim order, leased but uncharged. Each row's start is recorded before its code
runs (its attempt charged then), in one round trip that also stores the rows finished since
the last one, so a crash blames only the running row and loses no finished one. The last
outcomes are written with the next claim, in one transaction: successes in one statement,
a failure through the usual retry-or-fail pair, and rows a stop left unstarted handed back.
If the worker trips, the beat stores what finished and hands back what never started
(ledger.py). A gpu worker never batches: it keeps concurrency 1.
"""

from __future__ import annotations

import logging
import math
import threading
from functools import cache, partial
from typing import Any

import psycopg
from psycopg import sql
from psycopg.rows import dict_row

from .. import db, jobstore, queries
from ..backoff import retry_delay
from ..claim_worker import ClaimWorker
from ..errors import ConfigError
from ..executor import Outcome
from ..liveness.watchdogs import budget_for
from ..payloads import clean_text
from ..queries import JobTable
from ..session import first_line
from .ledger import BatchLedger, Finished
from .runner import BatchRunner, Job, Mode

log = logging.getLogger(__name__)

MAX_BATCH = 1000


@cache
def claim_batch_query(table: JobTable, claim_order: str) -> sql.Composed:
    """`claim_batch`, ordered like the one-job claim (fixed fragments only; no model affinity: no gpu here)."""
    order = sql.SQL(", ").join([queries.PRIORITY_ORDER[claim_order], queries.CREATED_ORDER])
    return sql.SQL(queries.raw("claim_batch")).format(table=sql.Identifier(table), order_by=order)


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
        self._batch: list[Job] = []
        self._ledger: BatchLedger | None = None
        self._start_lock = threading.Lock()  # threads mode: one start record at a time on the session

    def drain(self) -> int:
        """Claim, run and store batches until the queue is empty (or we are told to stop)."""
        ran = 0
        jobs = self.session.run(self._claim_batch) if self._may_claim() else []
        while jobs:
            outcomes = self._run_batch(jobs)
            ran += sum(o is not None for o in outcomes)
            jobs = self.session.run(partial(self._store_batch, jobs=jobs, outcomes=outcomes))
        return ran

    def _limit(self) -> int:
        if self.max_jobs is None:
            return self.batch_size
        return max(1, min(self.batch_size, self.max_jobs - self.jobs_done))

    def _claim_statement_batch(self) -> jobstore.Statement:
        params = {"queue": self.queue, "worker_id": self.worker_id, "lock_key": self.session.lock_key or 0,
                  "lease_seconds": self.settings.lease_seconds, "limit": self._limit()}
        return claim_batch_query(self.table, self.settings.claim_order), params

    def _claim_batch(self, conn: Any) -> list[Job]:
        with conn.cursor(row_factory=dict_row) as cur:
            jobs = cur.execute(*self._claim_statement_batch()).fetchall()
            if not jobs and jobstore.promote_due(conn, self.table, self.queue):
                jobs = cur.execute(*self._claim_statement_batch()).fetchall()
        return jobs

    def _budget(self, job: Job) -> float:
        return float(job.get("budget_seconds") or budget_for(job, self.settings))

    def _run_batch(self, jobs: list[Job]) -> list[Outcome | None]:
        self._batch, self._job = jobs, jobs[0]
        self._ledger = BatchLedger(jobs, self._outcome_statements)
        ids = tuple(j["id"] for j in jobs)
        if self.runner.mode == "sequential":
            budget = self._budget(jobs[0])  # the watchdogs then follow each job as it starts
        else:  # concurrent: the batch as a whole, at its slowest job's pace
            budget = max(map(self._budget, jobs)) * math.ceil(len(jobs) / self.runner.concurrency)
        self.beat.job_started(self.table, ids[0], budget, batch=ids, rows=self._ledger)
        outcomes = self.runner.run(jobs, start=self._start_row, finish=self._row_finished, stop=self.stop_event)
        self.jobs_done += sum(o is not None for o in outcomes)
        return outcomes

    def _start_row(self, job: Job) -> bool:
        """Record the row's start (and store the rows finished since the last record) before its code runs."""
        ledger = self._ledger
        if ledger is None or not ledger.start(job["id"]):
            return False
        with self._start_lock:
            attempts = self.session.run(partial(self._record_start, ledger=ledger, job_id=job["id"]))
        if attempts is None:
            ledger.not_ours(job["id"])
            return False
        job["attempts"] = attempts
        if self.runner.mode == "sequential":
            self._job = job
            self.beat.job_advanced(job["id"], self._budget(job))
        return True

    def _row_finished(self, job: Job, outcome: Outcome) -> None:
        if self._ledger is not None:
            self._ledger.finish(job, outcome)
        if self.runner.mode == "sequential":
            self.watch.finish()  # its code returned: no watchdog may trip on it now

    def _record_start(self, conn: Any, ledger: BatchLedger, job_id: int) -> int | None:
        """One statement, committed without waiting for the disk: the attempt it charged, or None if the row is not ours.

        It also stores the success finished just before; any other finished rows (a failure,
        or several at once in threads mode) ride ahead of it in the same round trip.
        """
        finished = ledger.finished()
        last = finished[-1] if finished and finished[-1][1].status == "completed" else None
        ahead = finished[:-1] if last is not None else finished
        start = (queries.query("start_batch_row", self.table), {
            "job_id": job_id, "worker_id": self.worker_id,
            "done_id": last[0]["id"] if last else None, "done_result": last[1].result if last else None})
        try:
            if ahead:
                row = db.one_round_trip(conn, [*self._finished_statements(ahead), start])[-1].fetchone()
            else:
                row = conn.execute(*start).fetchone()
        except psycopg.OperationalError:
            raise
        except Exception as exc:  # noqa: BLE001 - one bad outcome must not cost the row about to start
            log.error("batch write refused (%s); storing its %d finished jobs one by one", first_line(exc), len(finished))
            for job, outcome in finished:
                self._store_alone(conn, job, outcome)
            row = conn.execute(start[0], {**start[1], "done_id": None, "done_result": None}).fetchone()
        ledger.stored(finished)
        return None if row is None else int(row["attempts"])

    def _finished_statements(self, finished: Finished) -> list[jobstore.Statement]:
        return self._outcome_statements([j for j, _ in finished], [o for _, o in finished]) if finished else []

    def _store_batch(self, conn: Any, jobs: list[Job], outcomes: list[Outcome | None]) -> list[Job]:
        """The batch's last outcomes and the next claim, one (durable) transaction; a refused write is retried job by job.

        The beat keeps the batch until this commits: a trip meanwhile stores the same outcomes
        itself (the writes are fenced, so whichever commits second matches nothing), and the
        rows this commit releases are unstarted ones, whose loss never stops the worker.
        """
        ledger = self._ledger
        assert ledger is not None
        finished = ledger.finished()
        unstarted = [j for j, o in zip(jobs, outcomes) if o is None]
        pending_jobs = [*(j for j, _ in finished), *unstarted]
        pending_outcomes: list[Outcome | None] = [*(o for _, o in finished), *(None for _ in unstarted)]
        try:
            statements = self._outcome_statements(pending_jobs, pending_outcomes)
            claim_next = self._may_claim()
            if claim_next:
                statements.append(self._claim_statement_batch())
            cursors = db.one_round_trip(conn, statements)
            next_jobs = list(cursors[-1].fetchall()) if claim_next else []
        except psycopg.OperationalError:
            raise
        except Exception as exc:  # noqa: BLE001 - one bad outcome must not cost the batch or the worker
            log.error("batch write refused (%s); storing its %d jobs one by one", first_line(exc), len(pending_jobs))
            for job, outcome in zip(pending_jobs, pending_outcomes):
                self._store_alone(conn, job, outcome)
            next_jobs = self._claim_batch(conn) if self._may_claim() else []
        ledger.stored(finished)
        self.beat.job_finished()
        self._batch, self._job, self._ledger = [], None, None
        self._report_batch(jobs, outcomes)
        return next_jobs

    def _outcome_statements(self, jobs: list[Job], outcomes: list[Outcome | None]) -> list[jobstore.Statement]:
        """Successes in one statement, unstarted rows handed back in one, each failure as retry-or-fail."""
        statements: list[jobstore.Statement] = []
        done = [(j["id"], o.result) for j, o in zip(jobs, outcomes) if o is not None and o.status == "completed"]
        unstarted = [j["id"] for j, o in zip(jobs, outcomes) if o is None]
        if done:
            ids, results = zip(*done)
            statements.append((queries.query("complete_batch", self.table),
                               {"ids": list(ids), "results": list(results), "worker_id": self.worker_id}))
        if unstarted:
            statements.append((queries.query("release_job", self.table), {"ids": unstarted, "worker_id": self.worker_id}))
        for job, outcome in zip(jobs, outcomes):
            if outcome is not None and outcome.status == "failed":
                statements.extend(self._failure_statements(job, outcome.error or ""))
        return statements

    def _failure_statements(self, job: Job, error: str) -> list[jobstore.Statement]:
        """Retry after a backoff while attempts remain (the mark then matches nothing), else fail."""
        statements = []
        if job["attempts"] < job["max_attempts"]:
            delay = retry_delay(job["attempts"], base=self.settings.retry_base_seconds, cap=self.settings.retry_max_seconds)
            statements.append(jobstore.retry_statement(self.table, job["id"], self.worker_id, error=error, delay_seconds=delay))
        statements.append(jobstore.mark_statement(self.table, "failed", job["id"], error=error, worker_id=self.worker_id))
        return statements

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
                log.exception("job %s: not even its failure could be stored; its lease will return it", job["id"])

    def _report_batch(self, jobs: list[Job], outcomes: list[Outcome | None]) -> None:
        for job, outcome in zip(jobs, outcomes):
            if outcome is not None and outcome.status == "failed":
                last = (outcome.error or "").strip().splitlines()[-1:] or [""]
                log.warning("job %s attempt %s failed: %s", job["id"], job["attempts"], last[0])
        if log.isEnabledFor(logging.DEBUG):
            log.debug("batch of %d stored (%d not started, handed back)", len(jobs), sum(o is None for o in outcomes))

    def _abandon(self, job_id: int) -> None:
        """Grace ran out mid-batch: what finished is stored, the rest goes back uncharged, then the process leaves."""
        ledger = self._ledger
        if ledger is not None:
            self.beat.job_finished()  # the release below revokes rows: that must not read as a takeover
            finished, running, unstarted = ledger.close()
            try:
                with db.connect(autocommit=True, url=self.url) as conn, conn.transaction():
                    for statement in finished:
                        conn.execute(*statement)
                    jobstore.release(conn, self.table, [*running, *unstarted], self.worker_id)
            except psycopg.Error as exc:
                log.warning("batch rows not stored or handed back (%s); their leases will return them", first_line(exc))
        super()._abandon(job_id)

    def _shutdown(self) -> None:
        super()._shutdown()
        self.runner.close()
