"""The scheduler as a process: `queue-scheduler`, `python -m queue_workflows.scheduler`, `main()`.

The app module (`--app`, else QW_APP) is imported first; it registers its tasks and calls
`set_ingest_schedule([...])`. Entries are checked again at start, against this process's
registry and queues: a bad one is logged, naming the entry and the problem, and left out,
so it never takes the rest of the schedule down. `run(stop_event)` is the same loop for a
host that supervises its own threads.
"""

from __future__ import annotations

import argparse
import logging
import threading
from collections.abc import Iterable, Sequence

from queue_workflows import app_loader, config, db, pooler
from queue_workflows.errors import ConfigError, QueueWorkflowsError
from queue_workflows.schedule.clock import Clock
from queue_workflows.schedule.entries import ScheduleEntry, check_entry, ingest_schedule
from queue_workflows.schedule.slots import stamp
from queue_workflows.schedule.store import SlotStore
from queue_workflows.schedule.ticker import Ticker

log = logging.getLogger("queue_workflows.scheduler")


def usable_entries(entries: Iterable[ScheduleEntry]) -> list[ScheduleEntry]:
    """The entries that pass `check_entry` in this process; each one that does not is logged and left out."""
    usable, names = [], set()
    for index, entry in enumerate(entries):
        try:
            check_entry(entry, index)
        except QueueWorkflowsError as exc:
            log.error("%s; this entry is left out, the rest of the schedule runs", exc)
            continue
        if entry.name in names:
            log.error("duplicate schedule entry name %r; the second one is left out", entry.name)
            continue
        names.add(entry.name)
        usable.append(entry)
    return usable


def build_ticker(stop: threading.Event, entries: Sequence[ScheduleEntry], *, url: str | None = None) -> Ticker:
    """A ticker on the database clock (compressed when the test-only scale is set), sleeping on `stop`."""
    settings = config.current().settings
    store = SlotStore(url=url)
    clock = Clock.from_settings(store.db_now, stop, settings)
    return Ticker(entries, store, clock.now, clock.sleep, settings)


def _ticker_for(stop: threading.Event, entries: Iterable[ScheduleEntry] | None) -> Ticker:
    usable = usable_entries(ingest_schedule() if entries is None else entries)
    if not usable:
        raise ConfigError(
            "no usable schedule entries: the app module (QW_APP or --app) must call "
            "queue_workflows.set_ingest_schedule([...]) with entries whose task and queue exist here"
        )
    ticker = build_ticker(stop, usable)
    now = ticker.now_fn()
    for plan in ticker.plans:
        log.info(
            "schedule entry %r: %r (%s) -> %s on %r; next %s",
            plan.entry.name, plan.entry.cron_expression, plan.slots.zone.key, plan.entry.task_name, plan.entry.queue,
            stamp(plan.slots.next_after(now)),
        )
    return ticker


def run(stop_event: threading.Event, entries: Iterable[ScheduleEntry] | None = None) -> int:
    """Fire `entries` (default: the process's schedule) until `stop_event` is set; returns 0."""
    ticker = _ticker_for(stop_event, entries)
    log.info("scheduler running %d entr%s", len(ticker.plans), "y" if len(ticker.plans) == 1 else "ies")
    try:
        return ticker.run_forever()
    finally:
        ticker.store.close()
        log.info("scheduler stopped (%d job(s) enqueued)", len(ticker.enqueued))


def run_once(entries: Iterable[ScheduleEntry] | None = None) -> int:
    """Boot kicks and whatever slot is due now, then return (for a host's own cron, or a check)."""
    ticker = _ticker_for(threading.Event(), entries)
    try:
        ticker.tick(ticker.now_fn())
    finally:
        ticker.store.close()
    return 0


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="queue-scheduler", description="Enqueue the app's scheduled ingest jobs, once per slot across replicas.")
    parser.add_argument("--app", default=None, help="module that registers tasks and calls set_ingest_schedule (default: QW_APP)")
    parser.add_argument("--once", action="store_true", help="run boot kicks and any slot due now, then exit")
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point; SIGTERM/SIGINT end the sleep at once (exit 0)."""
    args = build_parser().parse_args(argv)
    app_loader.ensure_logging()

    def _body() -> int:
        loaded = app_loader.load_app(args.app)
        stop = threading.Event()
        app_loader.on_stop_signals(stop.set)
        db.wait_for_schema(url=loaded.config.database_url(), stop=stop)
        if stop.is_set():
            return 0
        pooler.require_session(loaded.config.database_url(), source=loaded.config.db_url_env)  # a long-running role, kept off a transaction pooler like the others (docs/poolers.md)
        return run_once() if args.once else run(stop)

    return app_loader.run_tool(_body)
