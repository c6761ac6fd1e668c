"""The orchestrator: apply migrations, win leadership, then run the leader's services until stopped.

Any number may run; one leads (`leadership`) on a lease it renews, the others stand by and take
over when it stops, dies or fails to renew (frozen, cut off); a leader that finds its term over
stops its services and stands by again. The leader runs the reclaim sweep, the DAG dispatch
drain, the DAG keeper, the timekeeper and retention, each guarded by its term. `python -m queue_workflows.leader.orchestrator` (and
`queue-orchestrator`) import the app first, so an in-process host's own `configure(...)` decides
the database; `run(stop_event)` is the same loop for a host that supervises its own threads.
"""

from __future__ import annotations

import argparse
import logging
import threading
import time
from collections.abc import Callable, Sequence

import psycopg

from queue_workflows import app_loader, config, db, pooler
from queue_workflows.common.backoff import Backoff
from queue_workflows.common.wake import WakeEvent
from queue_workflows.dag.keeper import RunKeeper
from queue_workflows.dag.outbox import DispatchDrain
from queue_workflows.dag.timekeeper import Timekeeper
from queue_workflows.errors import DatabaseUnreachableError
from queue_workflows.fair.sweep import TenantSweep
from queue_workflows.leader import reclaim
from queue_workflows.leader.cluster_metrics import ClusterMetrics
from queue_workflows.leader.history import HistoryMover
from queue_workflows.leader.leadership import Elector, Term
from queue_workflows.leader.retention import Retention
from queue_workflows.settings import Settings

log = logging.getLogger("queue_workflows.leader.orchestrator")  # also when run as __main__


def bootstrap_when_reachable(stop: threading.Event, *, timeout: float = 120.0) -> bool:
    """Apply the migration chain (or, with QW_MIGRATE_ON_START=false, wait for it), first waiting for Postgres.

    Waits only on what time may cure (a compose stack starts Postgres later); a malformed DSN,
    a missing database or a refused login raise ConfigError at once. False when stopped first.
    """
    if not config.current().settings.migrate_on_start:
        # Another role migrates (the stack's `migrate` service); this one may only wait for it.
        version = db.wait_for_schema(stop=stop)
        log.info("schema ready (version %d, migrated elsewhere)", version)
        return not stop.is_set()
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


def serve_metrics(settings: Settings) -> tuple[ClusterMetrics | None, Callable[[], None]]:
    """The cluster metrics and their endpoint (QW_ORCHESTRATOR_METRICS_PORT; 0: none), and how to close them."""
    if not settings.orchestrator_metrics_port:
        return None, lambda: None
    from queue_workflows.leader.cluster_exposition import MetricsEndpoint  # prometheus_client, only when served

    metrics = ClusterMetrics(interval=settings.orchestrator_metrics_interval_seconds, max_tasks=settings.orchestrator_metrics_max_tasks,
                             stale_after_seconds=3 * settings.heartbeat_seconds)
    return metrics, MetricsEndpoint(metrics, settings).close


def run(stop_event: threading.Event) -> int:
    """Migrations, then lead (or stand by, then lead) until `stop_event` is set."""
    metrics, close_metrics = serve_metrics(config.current().settings)  # first: a busy port fails at once
    try:
        if not bootstrap_when_reachable(stop_event):
            return 0
        cfg = config.current()
        pooler.require_session(cfg.database_url(), source=cfg.db_url_env)  # leadership and LISTEN are session state
        elector = Elector()
        reclaimed = 0
        try:
            while not stop_event.is_set():
                term = elector.campaign(stop_event)
                if term is None:
                    break
                reclaimed += lead(term, elector, stop_event, metrics)
        finally:
            elector.resign()
    finally:
        close_metrics()
    log.info("orchestrator stopped (%d job(s) reclaimed)", reclaimed)
    return 0


def lead(term: Term, elector: Elector, stop_event: threading.Event, metrics: ClusterMetrics | None = None) -> int:
    """The leader's services, guarded by `term`, until it ends; returns how many jobs the sweep reclaimed."""
    sweep = reclaim.ReclaimLoop(stop_event=term.ended, guard=term.guard)
    if metrics is not None:  # its counters start at zero with the term
        metrics.took_office(term.epoch, reclaims=lambda: dict(sweep.by_queue))
    services = {
        "qw-reclaim": sweep.run_forever,
        "qw-dispatch": DispatchDrain(stop_event=term.ended, guard=term.guard).run_forever,  # DAG outbox, woken by NOTIFY
        "qw-dag-keeper": RunKeeper(stop_event=term.ended, guard=term.guard).run_forever,  # input listener, reconcile
        "qw-timekeeper": Timekeeper(stop_event=term.ended, guard=term.guard).run_forever,  # sleeps, event waits, events
        "qw-retention": Retention(stop_event=term.ended, guard=term.guard).run_forever,  # finished rows past their window
        "qw-history": HistoryMover(stop_event=term.ended, guard=term.guard).run_forever,  # finished jobs leave the hot tables
        "qw-tenants": TenantSweep(stop_event=term.ended, guard=term.guard).run_forever,  # tenants with nothing queued leave the claim's walk
    }
    threads = [threading.Thread(target=target, name=name, daemon=True) for name, target in services.items()]
    for thread in threads:
        thread.start()
    log.info("orchestrator running: leading term %d; reclaim sweep every %.2fs, DAG dispatch drain", term.epoch, sweep.interval)
    elector.hold(term, stop_event)
    term.ended.set()
    if metrics is not None:
        metrics.left_office()
    for thread in threads:
        thread.join(timeout=10)
    if not stop_event.is_set():
        log.warning("term %d over: stepping down, standing by again", term.epoch)
    return sweep.total


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="queue-orchestrator", description="Apply migrations, then lead (or stand by): reclaim sweep, DAG dispatch, input listener.")
    parser.add_argument("--app", default=None, help="module imported first; its configure() applies (default: QW_APP)")
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point; SIGTERM/SIGINT stop the sweep cleanly (exit 0)."""
    args = build_parser().parse_args(argv)
    app_loader.ensure_logging()

    def _body() -> int:
        app_loader.load_app(args.app)
        stop = WakeEvent()  # the leader's hold wakes on it at once
        app_loader.on_stop_signals(stop.set)
        return run(stop)

    return app_loader.run_tool(_body)


if __name__ == "__main__":
    raise SystemExit(main())
