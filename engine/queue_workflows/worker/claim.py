"""The claim worker: one process, one queue, one job at a time.

LISTEN on the queue's own channel, drain greedily, and fall back to a safety poll so a
dropped NOTIFY costs at most `poll_seconds`. Claims and terminal marks run on the
session connection that holds the worker's advisory lock.
"""

from __future__ import annotations

import logging
import os
import secrets
import threading
import time
from typing import Any

import psycopg

from queue_workflows import config, db, jobstore, node_queue
from queue_workflows.common import sqlfile, tracing
from queue_workflows.common.health_stamp import HealthStamp
from queue_workflows.common.retry_policy import exception_names
from queue_workflows.common.text import first_line
from queue_workflows.common.wake import WakeEvent
from queue_workflows.control import WorkerSwitch
from queue_workflows.control.api import control_for
from queue_workflows.control.device import check_device_if_pending
from queue_workflows.control.throttle import Marks, Throttle
from queue_workflows.dag import execute
from queue_workflows.gpu import learn
from queue_workflows.gpu.cache import Acquired, ModelLoadError, using
from queue_workflows.gpu.devices import on_devices
from queue_workflows.gpu.side import GpuSide
from queue_workflows.jobrow import IngestJob, Job, JobStatus, claimed
from queue_workflows.payloads import clean_text
from queue_workflows.queries import JobTable
from queue_workflows.worker import exits, progress, retry
from queue_workflows.worker.executor import Outcome, job_log_fields, oom_outcome, run_ingest_job, run_node_job
from queue_workflows.worker.idle_baton import IdleBaton, Turn
from queue_workflows.worker.liveness import BeatConfig, LivenessBeat
from queue_workflows.worker.liveness.watchdogs import JobWatch, Trip, budget_for
from queue_workflows.worker.session import SessionClosed, WorkerSession
from queue_workflows.worker.usage import Usage, UsageMeter

_WORKER = sqlfile.load("queue_workflows.worker", "worker.sql")

log = logging.getLogger(__name__)



def ready_channel(queue: str) -> str:
    """The channel an enqueue on `queue` notifies (migration 0020): only this queue's workers wake."""
    return f"qw_ready_{queue}"


class ClaimWorker:
    def __init__(
        self,
        queue: str,
        *,
        max_jobs: int | None = None,
    ) -> None:
        cfg = config.current()
        self.settings = cfg.settings
        self.url = cfg.database_url()
        self.table: JobTable = node_queue.table_for(queue)
        self.is_node_queue = self.table == node_queue.NODE_TABLE
        self.queue = queue
        self.channel = ready_channel(queue)
        self.worker_id = f"{self.settings.host_label}:{queue}:{os.getpid()}:{secrets.token_hex(3)}"
        self.max_jobs = max_jobs if max_jobs is not None else self.settings.worker_max_jobs
        self.jobs_done = 0
        self.empty_claims = 0  # idle claims that found nothing: what the idle baton keeps down
        self.current_model: str | None = None
        self.stop_event = WakeEvent()  # heard at once by an idle wait in the socket
        self.session = WorkerSession(self.channel, url=self.url, stop_event=self.stop_event)
        self.switch = WorkerSwitch(self.settings.host_label, queue)
        self.watch = JobWatch(stall_seconds=self.settings.stall_timeout_seconds)
        self.throttle = Throttle(Marks.from_settings(self.settings))
        self.beat = LivenessBeat(
            BeatConfig.from_settings(self.settings, worker_id=self.worker_id, queue=queue),
            url=self.url, session=self.session, switch=self.switch, watch=self.watch, throttle=self.throttle,
        )
        self.beat.health = HealthStamp(self.settings.health_file)
        self._job: Job | None = None
        self._grace_timer: threading.Timer | None = None
        self.gpu = GpuSide(self.settings) if queue == "gpu" else None
        # A gpu worker picks jobs by the models it holds, so every idle one must see every job.
        # Each wait in line is one statement and one wake-up; a stop waits for it to end (at most a second).
        self.baton = IdleBaton(queue, self.table, wait_seconds=min(self.settings.poll_seconds, 1.0)) if self.gpu is None and self.settings.idle_baton else None
        self.meter = UsageMeter(vram=self.gpu is not None, sample_seconds=self.settings.gpu_vram_sample_seconds)
        self._usage: Usage | None = None
        self._claim_cache: tuple[Any, list[jobstore.Statement]] | None = None
        self._claim_ns = 0  # when the latest claim was sent, and its span (docs/tracing.md; None while tracing is off)
        self._claim_span: Any = None
        if self.gpu is not None:
            self.beat.gpu_fields = self.gpu.heartbeat_fields

    # -- lifecycle -------------------------------------------------------------------------

    def run_forever(self) -> int:
        db.wait_for_schema(url=self.url)
        try:
            # Connect, take the lock, LISTEN, and read our ON/OFF row: an OFF worker starts parked.
            self.session.run(self._read_switch)
            if self.baton is None:  # every idle worker here acts on NOTIFY: each enqueue must send one (migration 0051)
                self.session.run(lambda conn: conn.execute(_WORKER.sql("wake_on_every_enqueue"), {"queue": self.queue}))
            if self.gpu is not None:
                self.gpu.start()
                self.session.run(self.gpu.publish_models)
            progress.bind(self.watch)
            self.beat.start()
            log.info("worker %s ready on queue %r (lock %s)", self.worker_id, self.queue, self.session.lock_key)
            while self._running():
                self.drain()
                if not self._running():
                    break
                self._idle()
        except SessionClosed:
            pass
        finally:
            self._shutdown()
        return exits.EXIT_OK

    def _idle(self) -> None:
        """Wait for work: for the queue's NOTIFY (or a poll's timeout), or in line for its idle baton."""
        baton = self.baton
        if baton is not None and self._may_claim():
            if not self.session.run(baton.held_on):
                self._wait_in_line(baton)  # then drain(): the new holder's catch-up, or a poll
                return
        elif baton is not None:
            self.session.run(baton.release)  # parked, throttled or stopping: let another worker listen
        if not self.session.wait(self.settings.poll_seconds, self.queue, wake=self.switch.changed) and self.gpu is not None:
            self.gpu.idle()  # a quiet poll: unload models unused for QW_GPU_IDLE_UNLOAD_SECONDS

    def _wait_in_line(self, baton: IdleBaton) -> None:
        """Queue for the baton until it is ours or the queue has work (a stalled holder's), in waits of
        at most a second so a stop or a switch is heard; each wait looks for work in its round trip."""
        while self._may_claim():
            if self.switch.changed.is_set():
                self.switch.changed.clear()
                return
            if self.session.run(baton.wait_turn) is not Turn.WAIT:
                return

    def _read_switch(self, conn: Any) -> None:
        row = control_for(self.settings.host_label, self.queue, conn)
        self.switch.apply(row, at_start=True)
        if self.queue == "gpu":
            check_device_if_pending(conn, self.switch, row)

    def request_stop(self) -> None:
        """Stop claiming; a running job gets `shutdown_grace_seconds` to finish, then is handed back."""
        if self.stop_event.is_set():
            return
        self.stop_event.set()
        self.beat.stopping()
        job = self._job
        if job is not None and self._grace_timer is None:
            log.info("stop requested; letting job %s finish (up to %.0fs)", job.id, self.settings.shutdown_grace_seconds)
            self._grace_timer = threading.Timer(self.settings.shutdown_grace_seconds, self._abandon, args=(job.id,))
            self._grace_timer.daemon = True
            self._grace_timer.start()

    def _abandon(self, job_id: int) -> None:
        """Grace ran out: requeue the job without charging an attempt, then leave at once."""
        fence = self.beat.fence  # a commit in flight decides first whether the job still runs; a stuck one does not
        with fence.deciding(fence.wait_seconds) as fenced:
            job = self._job
            if job is None or job.id != job_id or (fenced and self.beat.job_returned_uncommitted):
                return  # finished: the main thread stores its outcome, then stops
            self.beat.job_finished()  # the release below revokes the job: that must not read as a takeover
            try:
                exits.kill_job_processes()  # the job's own children must not run on once it is handed back
                with db.connect(autocommit=True, url=self.url) as conn:
                    released = jobstore.release(conn, self.table, [job_id], self.worker_id)
                    conn.execute(_WORKER.sql("delete_heartbeat"), {"worker_id": self.worker_id})
                log.warning("job %s %s; exiting", job_id, "requeued" if released else "was no longer ours")
            finally:
                tracing.flush(1.0)  # os._exit skips the exporter's own flush
                logging.shutdown()
                os._exit(exits.EXIT_OK)

    def _shutdown(self) -> None:
        if self._grace_timer is not None:
            self._grace_timer.cancel()
        if self.beat.is_alive():
            self.beat.stop()
        self.session.close()
        log.info("worker %s stopped after %d job(s) and %d empty claim(s)", self.worker_id, self.jobs_done, self.empty_claims)

    # -- claim and run ---------------------------------------------------------------------

    def drain(self) -> int:
        """Claim and run jobs until the queue is empty (or we are told to stop).

        Each job's outcome commits in the same transaction as the next claim: one commit per job.
        When that claim finds nothing, one more claim first promotes the queue's due delayed jobs
        (with an idle baton, the worker goes in line instead, and the holder does that).
        """
        ran = 0
        job = self.session.run(self._claim_and_start) if self._may_claim() else None
        while job is not None:
            current = job
            with tracing.run_span(current, self.worker_id, self.settings.host_label, self._claim_span) as span, \
                    job_log_fields(current):  # its model load, outcome and report name it (and its trace) in the logs too
                outcome, elapsed = self._execute(current)
                span.outcome(outcome.status, outcome.error, outcome.exception)
                if outcome.gpu_error == "device":  # the process's GPU context is suspect: hand the job on and leave
                    self.beat.trip_current_job(Trip(exits.EXIT_DEVICE_ERROR, f"GPU device error: {(outcome.error or '').splitlines()[-1:]}"))
                self.beat.job_returned()
                ran += 1
                marked, retry_in, job = self.session.run(lambda conn: self._store_outcome(conn, current, outcome))  # noqa: B023 - runs now, in this iteration
                self._report(current, outcome, marked, retry_in, elapsed)
            if job is None and self.baton is None and self._may_claim():
                job = self.session.run(self._claim_and_start)  # with a baton, its holder promotes and claims instead
        return ran

    def _running(self) -> bool:
        return not self.stop_event.is_set() and (self.max_jobs is None or self.jobs_done < self.max_jobs)

    def _may_claim(self) -> bool:
        return self._running() and not self.switch.parked and not self.throttle.active and (self.gpu is None or self.gpu.may_claim())


    def _claim_statements(self) -> list[jobstore.Statement]:
        """The claim, after its queue's prelude if any (node_queue.claim_statements)."""
        claimant = jobstore.Claimant(self.worker_id, self.session.lock_key or 0)
        if self.gpu is None:  # the same until a reconnect draws another key or the engine is reconfigured: built once
            key = (claimant, config.current())
            if self._claim_cache is None or self._claim_cache[0] != key:
                self._claim_cache = key, node_queue.claim_statements(self.table, self.queue, claimant, current_model=self.current_model)
            return self._claim_cache[1]
        return node_queue.claim_statements(self.table, self.queue, claimant, current_model=self.current_model,
                                           loaded_models=self.gpu.loaded(), vram_available_gb=self.gpu.vram_available_gb(),
                                           gpu_devices=self.gpu.claim_devices())

    def _claim_once(self, conn: Any) -> Job | None:
        statements = self._claim_statements()
        if len(statements) == 1:
            return claimed(jobstore.fetch_one(conn, statements[0]))
        return claimed(db.one_round_trip(conn, statements)[-1].fetchone())

    def _claim(self, conn: Any) -> Job | None:
        job = self._claim_once(conn)
        if job is None and jobstore.promote_due(conn, self.table, self.queue):
            job = self._claim_once(conn)
        if job is None:
            self.empty_claims += 1
        elif self.baton is not None:
            self.baton.release(conn)  # busy now: the next idle worker in line listens
        return job

    def _claim_and_start(self, conn: Any) -> Job | None:
        with self.beat.committing():  # a trip sees the claimed job as running from its commit on
            sent_at, self._claim_ns = self.beat.now_fn(), tracing.clock()
            if (job := self._claim(conn)) is not None:
                self._started(job, sent_at)
            return job

    def _started(self, job: Job, sent_at: float) -> None:
        """The claimed job is running from here: its lease (counted from `sent_at`, before the claim went out) is renewed and its watchdogs armed."""
        self._job = job
        self._claim_span = tracing.claim_span(job, self._claim_ns, self.worker_id, self.settings.host_label)
        self.beat.job_started(self.table, job.id, budget_for(job, self.settings), timeout=retry.timeout_for(job, self.settings), claimed_at=sent_at)

    def _execute(self, job: Job) -> tuple[Outcome, float]:
        started = time.monotonic()
        self.meter.start(devices=getattr(job, "gpu_devices", None))  # its VRAM is read where it was placed
        outcome, acquired = self._run_job(job)
        self._usage = self.meter.finish(load_seconds=acquired.load_seconds if acquired else None, hit=acquired.hit if acquired else None)
        self.jobs_done += 1
        return outcome, time.monotonic() - started

    def _run_job(self, job: Job) -> tuple[Outcome, Acquired | None]:
        """The job's code, with its model loaded first on a gpu worker, and a DAG node's run read before (the executor reads nothing)."""
        if isinstance(job, IngestJob):
            return run_ingest_job(job), None
        if self.gpu is None:
            return run_node_job(job, execute.load_context(job, url=self.url)), None
        try:
            with tracing.model_load_span(job.required_model) if job.required_model else tracing.NO_SPAN as load:
                acquired = self.gpu.acquire(job)
                if acquired is not None:
                    load.loaded(acquired.hit, acquired.load_seconds)
        except ModelLoadError as exc:
            return Outcome(JobStatus.FAILED, error=str(exc), exception=exception_names(type(exc))), None
        self.current_model = self.gpu.most_recent()  # the claim prefers its jobs next
        if acquired is not None and not acquired.hit:
            self.beat.models_changed()
        with using(acquired.model if acquired else None), on_devices(job.gpu_devices):
            return run_node_job(job, execute.load_context(job, url=self.url)), acquired

    def _store_outcome(
        self, conn: Any, job: Job, outcome: Outcome
    ) -> tuple[jobstore.Row | None, float | None, Job | None]:
        """`_finish_and_claim`; when the outcome itself is refused, store that refusal as the failure.

        Nothing here may end the worker: if even the refusal cannot be stored, the job is left
        running without a lease renewer, so it lapses back to the queue.
        """
        with self.beat.committing():  # until the beat knows what runs next (liveness/fence.py)
            try:
                return self._finish_and_claim(conn, job, outcome)
            except psycopg.OperationalError:
                raise  # the session reconnects and tries again
            except Exception as exc:  # noqa: BLE001 - a refused outcome must not kill the worker
                log.error("job %s: its outcome could not be stored (%s); recording that as its failure", job.id, first_line(exc))
                refused = Outcome(JobStatus.FAILED, error=clean_text(f"the job's outcome could not be stored: {type(exc).__name__}: {first_line(exc)}"),
                                  exception=exception_names(type(exc)))
            try:
                return self._finish_and_claim(conn, job, refused)
            except psycopg.OperationalError:
                raise
            except Exception:  # noqa: BLE001
                log.exception("job %s: not even its failure could be stored; its lease will return it to the queue", job.id)
                self._job = None
                self.beat.job_finished()
                return None, None, None

    def _finish_and_claim(
        self, conn: Any, job: Job, outcome: Outcome
    ) -> tuple[jobstore.Row | None, float | None, Job | None]:
        """Store the outcome and claim the next job in one transaction, sent as one pipeline.

        A failure its retry policy retries (worker/retry.py) is requeued after a backoff; the
        guarded mark after it then matches nothing. Otherwise the mark fails it, saying why.
        """
        statements = []
        usage, self._usage = self._usage, None
        completed = outcome.status == JobStatus.COMPLETED and outcome.gpu_error is None
        if usage is not None and not completed:  # what the job cost, stamped while the row is still running and ours
            statements.append(usage.statement(self.table, job.id, self.worker_id))
        if outcome.gpu_error == "oom":  # the model needs more than it was placed on (gpu/learn.py)
            statements.extend(learn.raise_need_statements(job, held_bytes=usage.peak_vram_bytes if usage else None,
                                                          free_gb=self.gpu.free_gb(getattr(job, "gpu_devices", None)) if self.gpu is not None else None))
            outcome = oom_outcome(job, outcome)
        prefix = len(statements)  # rows of the outcome's own statements start after these
        retry_in = None
        if outcome.gpu_error == "oom":  # not the task's fault: requeued once, uncharged
            error = f"GPU out of memory (requeued once, no attempt charged): {outcome.error}"
            statements.append(learn.oom_requeue_statement(self.table, job.id, self.worker_id, error=error))
        elif outcome.status == JobStatus.FAILED:  # its retry policy decides: retried after a backoff, or failed now
            verdict = retry.decision(job, outcome.exception, self.settings)
            retry_in = verdict.retry_in
            statements.extend(retry.failure_statements(self.table, job, self.worker_id, error=outcome.error or "", verdict=verdict))
        elif usage is not None and completed:  # the common case: its usage rides in its mark, one row version
            statements.append(usage.completed_statement(self.table, job.id, self.worker_id, outcome.result))
        else:
            statements.append(jobstore.mark_statement(self.table, outcome.status, job.id, result=outcome.result, worker_id=self.worker_id))
        claim = self._claim_statements() if self._may_claim() else []
        statements.extend(claim)
        sent_at, self._claim_ns = self.beat.now_fn(), tracing.clock()
        cursors = db.one_round_trip(conn, statements)
        rows = [cursor.fetchone() for cursor in cursors[prefix:len(cursors) - len(claim)]]
        self._job = None
        self.beat.job_finished()  # a revocation our own commit caused lapses behind the fence
        next_job = claimed(cursors[-1].fetchone()) if claim else None
        if next_job is not None:
            self._started(next_job, sent_at)
        retried = rows[0] if retry_in is not None else None
        return retried or rows[-1], (retry_in if retried else None), next_job

    def _report(self, job: Job, outcome: Outcome, marked: Any, retry_in: float | None, elapsed: float) -> None:
        if marked is None:
            log.warning("job %s finished after %.3fs but was no longer ours; result discarded", job.id, elapsed)
        elif outcome.gpu_error == "oom" and not job.oom_requeued:
            log.warning("job %s: GPU out of memory after %.3fs; requeued once, no attempt charged (now %s)", job.id, elapsed, marked["status"])
        elif outcome.status == JobStatus.FAILED:
            last_line = (outcome.error or "").strip().splitlines()[-1:] or [""]
            refused = str(marked.get("error") or "")
            then = f"retry in {retry_in:.1f}s" if retry_in is not None else refused.splitlines()[0] if refused.startswith("no retry:") else "no attempts left"
            log.warning("job %s attempt %s failed after %.3fs (%s): %s", job.id, job.attempts, elapsed, then, last_line[0])
        elif log.isEnabledFor(logging.INFO):
            log.info("job %s completed in %.3fs", job.id, elapsed)

__all__ = ["ClaimWorker", "ready_channel"]
