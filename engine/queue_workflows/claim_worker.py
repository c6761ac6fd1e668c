"""The claim worker: one process, one queue, one job at a time.

LISTEN for the queue's channel, drain greedily, and fall back to a safety poll so a
dropped NOTIFY costs at most `poll_seconds`. Claims and terminal marks run on the
session connection that holds the worker's advisory lock.
"""

from __future__ import annotations

import argparse
import importlib
import logging
import os
import secrets
import signal
import threading
import time
from collections.abc import Callable, Sequence
from typing import Any

from . import config, db, jobstore, node_queue, queries
from .backoff import retry_delay
from .errors import ConfigError
from .executor import Outcome, run_ingest_job, run_node_job
from .liveness import LivenessBeat
from .queries import JobTable
from .session import SessionClosed, WorkerSession

log = logging.getLogger(__name__)

EXIT_OK = 0


class ClaimWorker:
    def __init__(
        self,
        queue: str,
        *,
        max_jobs: int | None = None,
        on_job_done: Callable[[dict[str, Any], Outcome], None] | None = None,
    ) -> None:
        cfg = config.current()
        self.settings = cfg.settings
        self.url = cfg.database_url()
        self.is_node_queue = queue in node_queue.NODE_QUEUES
        if self.is_node_queue:
            node_queue.check_node_queue(queue)
        else:
            node_queue.check_ingest_queue(queue)
        self.queue = queue
        self.table: JobTable = node_queue.NODE_TABLE if self.is_node_queue else node_queue.INGEST_TABLE  # type: ignore[assignment]
        self.channel = "node_job_ready" if self.is_node_queue else "ingest_job_ready"
        self.worker_id = f"{self.settings.host_label}:{queue}:{os.getpid()}:{secrets.token_hex(3)}"
        self.max_jobs = max_jobs
        self.on_job_done = on_job_done
        self.jobs_done = 0
        self.current_model: str | None = None
        self.stop_event = threading.Event()
        self.session = WorkerSession(self.channel, url=self.url, stop_event=self.stop_event)
        self.beat = LivenessBeat(
            url=self.url,
            worker_id=self.worker_id,
            host_label=self.settings.host_label,
            queue=queue,
            lock_key_fn=lambda: self.session.lock_key,
            lease_seconds=self.settings.lease_seconds,
            renew_seconds=self.settings.lease_renew_seconds,
            heartbeat_seconds=self.settings.heartbeat_seconds,
        )
        self._job: dict[str, Any] | None = None
        self._grace_timer: threading.Timer | None = None

    # -- lifecycle -------------------------------------------------------------------------

    def run_forever(self) -> int:
        db.wait_for_schema(url=self.url)
        try:
            self.session.conn  # connect, take the session lock, LISTEN
            self.beat.start()
            log.info("worker %s ready on queue %r (lock %s)", self.worker_id, self.queue, self.session.lock_key)
            while not self.stop_event.is_set():
                self.drain()
                if self.stop_event.is_set() or self._reached_max_jobs():
                    break
                self.session.wait(self.settings.poll_seconds, self.queue)
        except SessionClosed:
            pass
        finally:
            self._shutdown()
        return EXIT_OK

    def request_stop(self) -> None:
        """Stop claiming; a running job gets `shutdown_grace_seconds` to finish, then is handed back."""
        if self.stop_event.is_set():
            return
        self.stop_event.set()
        self.beat.stopping()
        job = self._job
        if job is not None and self._grace_timer is None:
            log.info("stop requested; letting job %s finish (up to %.0fs)", job["id"], self.settings.shutdown_grace_seconds)
            self._grace_timer = threading.Timer(self.settings.shutdown_grace_seconds, self._abandon, args=(job["id"],))
            self._grace_timer.daemon = True
            self._grace_timer.start()

    def _abandon(self, job_id: int) -> None:
        """Grace ran out: requeue the job without charging an attempt, then leave at once."""
        job = self._job
        if job is None or job["id"] != job_id:
            return
        try:
            with db.connect(autocommit=True, url=self.url) as conn:
                released = jobstore.release(conn, self.table, job_id, self.worker_id)
                conn.execute(queries.query("delete_heartbeat"), {"worker_id": self.worker_id})
            log.warning("job %s %s; exiting", job_id, "requeued" if released else "was no longer ours")
        finally:
            logging.shutdown()
            os._exit(EXIT_OK)

    def _shutdown(self) -> None:
        if self._grace_timer is not None:
            self._grace_timer.cancel()
        if self.beat.is_alive():
            self.beat.stop()
        self.session.close()
        log.info("worker %s stopped after %d job(s)", self.worker_id, self.jobs_done)

    def _reached_max_jobs(self) -> bool:
        return self.max_jobs is not None and self.jobs_done >= self.max_jobs

    # -- claim and run ---------------------------------------------------------------------

    def drain(self) -> int:
        """Claim and run jobs until the queue is empty (or we are told to stop)."""
        ran = 0
        while not self.stop_event.is_set() and not self._reached_max_jobs():
            job = self.session.run(self._claim)
            if job is None:
                break
            self._execute(job)
            ran += 1
        return ran

    def _claim(self, conn: Any) -> dict[str, Any] | None:
        claimant = jobstore.Claimant(self.worker_id, self.session.lock_key or 0)
        if self.is_node_queue:
            return node_queue.claim_node_job(self.queue, claimant, current_model=self.current_model, conn=conn)
        return node_queue.claim_ingest_job(self.queue, claimant, conn=conn)

    def _execute(self, job: dict[str, Any]) -> None:
        self._job = job
        self.beat.job_started(self.table, job["id"])
        started = time.monotonic()
        try:
            outcome = run_node_job(job) if self.is_node_queue else run_ingest_job(job)
            marked, retry_in = self.session.run(lambda conn: self._record(conn, job, outcome))
        finally:
            self.beat.job_finished()
            self._job = None
        self.jobs_done += 1
        elapsed = time.monotonic() - started
        if marked is None:
            log.warning("job %s finished after %.3fs but was no longer ours; result discarded", job["id"], elapsed)
        elif outcome.status == "failed":
            last_line = (outcome.error or "").strip().splitlines()[-1:] or [""]
            then = f"retry in {retry_in:.1f}s" if retry_in is not None else "no attempts left"
            log.warning("job %s attempt %s failed after %.3fs (%s): %s", job["id"], job["attempts"], elapsed, then, last_line[0])
        else:
            log.info("job %s completed in %.3fs", job["id"], elapsed)
        if self.on_job_done is not None:
            self.on_job_done(job, outcome)


    def _record(self, conn: Any, job: dict[str, Any], outcome: Outcome) -> tuple[dict[str, Any] | None, float | None]:
        """Store the outcome; a failure with attempts left is requeued after a backoff delay instead."""
        if outcome.status == "failed" and job["attempts"] < job["max_attempts"]:
            delay = retry_delay(job["attempts"], base=self.settings.retry_base_seconds, cap=self.settings.retry_max_seconds)
            row = jobstore.retry(conn, self.table, job["id"], self.worker_id, error=outcome.error or "", delay_seconds=delay)
            if row is not None:
                return row, delay
        row = jobstore.mark(
            self.table, outcome.status, job["id"], result=outcome.result, error=outcome.error, worker_id=self.worker_id, conn=conn
        )
        return row, None


def import_app(module: str | None) -> None:
    """Import the host application module that registers its tasks."""
    if not module:
        return
    try:
        importlib.import_module(module)
    except ImportError as exc:
        raise ConfigError(f"QW_APP: cannot import application module {module!r}: {exc}") from exc


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="queue-claim-worker", description="Run one claim worker for one queue.")
    parser.add_argument("--queue", required=True, help="cpu, gpu, or one of the configured ingest queues")
    parser.add_argument("--app", default=None, help="module that registers tasks (default: QW_APP)")
    parser.add_argument("--max-jobs", type=int, default=None, help="exit after this many jobs")
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point: `claim_worker.main(["--queue", "gpu"])`. SIGTERM/SIGINT stop it gracefully."""
    args = build_parser().parse_args(argv)
    import_app(args.app or config.current().settings.app)
    worker = ClaimWorker(args.queue, max_jobs=args.max_jobs)
    if threading.current_thread() is threading.main_thread():
        for signum in (signal.SIGTERM, signal.SIGINT):
            signal.signal(signum, lambda *_: worker.request_stop())
    return worker.run_forever()


if __name__ == "__main__":
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    raise SystemExit(main())
