"""The claim worker's command line: `queue-claim-worker --queue Q`, or `claim_worker.main([...])`."""

from __future__ import annotations

import argparse
import threading
from collections.abc import Sequence

from queue_workflows import app_loader, config, db, node_queue, pooler
from queue_workflows.errors import TransactionPoolerError
from queue_workflows.worker import exit_log, exits
from queue_workflows.worker.batch import BatchWorker
from queue_workflows.worker.claim import ClaimWorker
from queue_workflows.worker.liveness import id_notes

__all__ = ["build_parser", "build_worker", "main"]


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="queue-claim-worker", description="Run one claim worker for one queue.")
    parser.add_argument("--queue", required=True, help="cpu, gpu, or one of the configured ingest queues")
    parser.add_argument("--app", default=None, help="module that registers tasks and may call configure() (default: QW_APP)")
    parser.add_argument("--max-jobs", type=int, default=None, help="exit after this many jobs")
    batch = parser.add_argument_group("batch mode (cpu and ingest queues; default: QW_BATCH_SIZE, QW_BATCH_MODE, QW_BATCH_CONCURRENCY)")
    batch.add_argument("--batch", type=int, default=None, metavar="N", help="claim up to N jobs per statement (1: one at a time)")
    batch.add_argument("--batch-mode", choices=("sequential", "threads", "async"), default=None,
                       help="run a batch one job after another, on a thread pool, or (async def tasks) on an event loop")
    batch.add_argument("--concurrency", type=int, default=None, metavar="M", help="jobs of a batch running at once (threads/async)")
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point: `claim_worker.main(["--queue", "gpu"])`. SIGTERM/SIGINT stop it gracefully.

    Imports the app before reading settings (so its configure() holds), logs to stderr when
    the host has not set logging up, and reports a configuration problem as one line, exit 2.
    """
    args = build_parser().parse_args(argv)
    app_loader.ensure_logging()
    return app_loader.run_tool(lambda: _run(args))


def build_worker(args: argparse.Namespace) -> ClaimWorker:
    """A one-job worker, or a batch worker when a batch size or concurrency above 1 is asked for."""
    settings = config.current().settings
    size = args.batch if args.batch is not None else settings.batch_size
    mode = args.batch_mode or settings.batch_mode
    concurrency = args.concurrency if args.concurrency is not None else settings.batch_concurrency
    if size == 1 and concurrency == 1 and mode == "sequential":
        return ClaimWorker(args.queue, max_jobs=args.max_jobs)
    return BatchWorker(args.queue, batch_size=size, mode=mode, concurrency=concurrency, max_jobs=args.max_jobs)


def _run(args: argparse.Namespace) -> int:
    loaded = app_loader.load_app(args.app)
    worker = build_worker(args)
    stop = threading.Event()

    def _stop() -> None:
        stop.set()
        worker.request_stop()

    app_loader.on_stop_signals(_stop)
    db.wait_for_schema(url=loaded.config.database_url(), stop=stop)  # SIGINT/SIGTERM end the wait at once
    if stop.is_set():
        return exits.EXIT_OK
    try:
        pooler.require_session(loaded.config.database_url(), source=loaded.config.db_url_env)  # its lock and LISTEN are session state
    except TransactionPoolerError as exc:
        exit_log.record_now(loaded.config.database_url(), worker_id=worker.worker_id, host_label=loaded.config.settings.host_label,
                            queue=args.queue, code=exits.EXIT_TRANSACTION_POOLER, reason=str(exc))
        raise
    if args.queue not in node_queue.NODE_QUEUES:
        app_loader.warn_unrunnable_jobs(args.queue, loaded)
    id_notes.note(worker.worker_id, loaded.config.database_url())  # for `qw health worker` in this container
    try:
        with exits.owning_job_processes():  # one process == one worker: what else runs under it is its jobs'
            return worker.run_forever()
    finally:
        id_notes.forget()


if __name__ == "__main__":
    raise SystemExit(main())
