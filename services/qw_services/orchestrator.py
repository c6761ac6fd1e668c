"""`queue-orchestrator`: apply migrations, then run the reclaim sweep until stopped."""

from __future__ import annotations

import logging
import threading
import time

import psycopg

from queue_workflows import db, reclaim
from queue_workflows.backoff import Backoff

from .runtime import load_config_or_exit, setup_logging, stop_on_signals

log = logging.getLogger("queue_workflows.orchestrator")


def bootstrap_when_reachable(stop: threading.Event, *, timeout: float = 120.0) -> bool:
    """Apply the migration chain, waiting for Postgres to accept connections first."""
    backoff = Backoff(initial=0.2, maximum=3.0)
    deadline = time.monotonic() + timeout
    while not stop.is_set():
        try:
            applied = db.bootstrap()
            log.info("schema ready (applied %s)", applied or "nothing new")
            return True
        except psycopg.OperationalError as exc:
            if time.monotonic() > deadline:
                raise
            delay = backoff.next_delay()
            log.warning("waiting for Postgres (%s); retry in %.1fs", str(exc).strip().splitlines()[0], delay)
            stop.wait(delay)
    return False


def main() -> int:
    setup_logging("orchestrator")
    load_config_or_exit()
    stop = threading.Event()
    stop_on_signals(stop.set)
    if not bootstrap_when_reachable(stop):
        return 0
    loop = reclaim.ReclaimLoop(stop_event=stop)
    log.info("orchestrator running: reclaim sweep every %.2fs", loop.interval)
    loop.run_forever()
    log.info("orchestrator stopped (%d job(s) reclaimed)", loop.total)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
