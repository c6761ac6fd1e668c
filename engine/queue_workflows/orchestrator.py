"""The orchestrator: apply migrations, then run the reclaim sweep until stopped.

`python -m queue_workflows.orchestrator` (and `queue-orchestrator`) import the app first, so
an in-process host's own `configure(...)` decides the database; `run(stop_event)` is the same
loop for a host that supervises its own threads.
"""

from __future__ import annotations

import argparse
import logging
import threading
import time
from collections.abc import Sequence

import psycopg

from . import app_loader, db, reclaim
from .backoff import Backoff
from .dag.keeper import RunKeeper
from .dag.outbox import DispatchDrain
from .errors import DatabaseUnreachableError

log = logging.getLogger("queue_workflows.orchestrator")  # also when run as __main__


def bootstrap_when_reachable(stop: threading.Event, *, timeout: float = 120.0) -> bool:
    """Apply the migration chain, first waiting for Postgres to accept connections.

    Waits only on what time may cure (a compose stack starts Postgres later); a malformed DSN,
    a missing database or a refused login raise ConfigError at once. False when stopped first.
    """
    backoff = Backoff(initial=0.2, maximum=3.0)
    deadline = time.monotonic() + timeout
    while not stop.is_set():
        try:
            applied = db.bootstrap()
            log.info("schema ready (applied %s)", applied or "nothing new")
            return True
        except (psycopg.OperationalError, psycopg.ProgrammingError) as exc:
            problem = db.connect_error(exc)
            if not isinstance(problem, DatabaseUnreachableError) or time.monotonic() > deadline:
                raise problem from None
            delay = backoff.next_delay()
            log.warning("waiting for Postgres (%s); retry in %.1fs", problem, delay)
            stop.wait(delay)
    return False


def run(stop_event: threading.Event) -> int:
    """Migrations, then the sweep (reclaim, promote, prune) until `stop_event` is set."""
    if not bootstrap_when_reachable(stop_event):
        return 0
    loop = reclaim.ReclaimLoop(stop_event=stop_event)
    dispatch = threading.Thread(target=DispatchDrain(stop_event=stop_event).run_forever, name="qw-dispatch", daemon=True)
    dispatch.start()  # the DAG outbox drain, woken by NOTIFY qw_dispatch
    keeper = threading.Thread(target=RunKeeper(stop_event=stop_event).run_forever, name="qw-dag-keeper", daemon=True)
    keeper.start()  # DAG input listener (NOTIFY qw_input) and the reconcile sweep
    log.info("orchestrator running: reclaim sweep every %.2fs, DAG dispatch drain", loop.interval)
    loop.run_forever()
    dispatch.join(timeout=5)
    keeper.join(timeout=5)
    log.info("orchestrator stopped (%d job(s) reclaimed)", loop.total)
    return 0


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="queue-orchestrator", description="Apply migrations, then run the reclaim sweep.")
    parser.add_argument("--app", default=None, help="module imported first; its configure() applies (default: QW_APP)")
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point; SIGTERM/SIGINT stop the sweep cleanly (exit 0)."""
    args = build_parser().parse_args(argv)
    app_loader.ensure_logging()

    def _body() -> int:
        app_loader.load_app(args.app)
        stop = threading.Event()
        app_loader.on_stop_signals(stop.set)
        return run(stop)

    return app_loader.run_tool(_body)


if __name__ == "__main__":
    raise SystemExit(main())
