"""The ticker: sleep to the next due slot, enqueue it exactly once, repeat until stopped.

Pure decisions live in `slots`; this module only sequences them against a clock and a
store. `now_fn` and `sleep_fn` are seams: the service passes the database clock and a wait
on its stop event, tests pass a virtual clock and a recorder. `sleep_fn(seconds)` returns
True when the ticker should stop.

Failure handling, by kind: a database error (Postgres restarting, a dropped connection)
backs off and retries the same slot, which is then still on time or falls to the entry's
catch-up policy; an error from one entry (its task no longer registered, its args no
longer valid) is logged with the entry's name and the slot is given up, while every other
entry goes on firing. Neither ends the loop.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta

import psycopg

from queue_workflows import config
from queue_workflows.common.backoff import Backoff
from queue_workflows.common.health_stamp import HealthStamp
from queue_workflows.errors import QueueWorkflowsError
from queue_workflows.jobstore import Row
from queue_workflows.schedule.entries import ScheduleEntry
from queue_workflows.schedule.slots import Fire, Slots, decide, stamp
from queue_workflows.schedule.store import SlotStore
from queue_workflows.settings import Settings

log = logging.getLogger("queue_workflows.scheduler")

MIN_SLEEP = 0.01
"""Shortest sleep (clock seconds): a wake a hair early re-reads the clock, it never spins."""
MAX_SLEEP = 60.0
"""Longest sleep (clock seconds) before the ticker looks at the clock again."""
PRUNE_EVERY = timedelta(hours=1)


@dataclass
class Plan:
    entry: ScheduleEntry
    slots: Slots
    last: datetime | None = None
    """The latest slot handled (enqueued by anyone, or decided on by this ticker)."""


@dataclass
class Ticker:
    """Fires `entries` against `store` on the clock `now_fn`, sleeping with `sleep_fn`."""

    entries: Sequence[ScheduleEntry]
    store: SlotStore
    now_fn: Callable[[], datetime]
    sleep_fn: Callable[[float], bool | None]
    settings: Settings = field(default_factory=lambda: config.current().settings)
    plans: list[Plan] = field(init=False)
    started: bool = field(default=False, init=False)
    enqueued: list[Row] = field(default_factory=list, init=False)
    """Jobs this ticker enqueued (boot kicks included), oldest first, for tests and logs."""
    _pruned_at: datetime | None = field(default=None, init=False)

    def __post_init__(self) -> None:
        zone = self.settings.schedule_timezone
        self.plans = [Plan(e, Slots.of(e.cron_expression, e.zone_name(zone))) for e in self.entries]

    def start(self, now: datetime) -> None:
        """Learn each entry's last slot from the ledger, then run the boot kicks."""
        last = self.store.last_slots()
        for plan in self.plans:
            row = last.get(plan.entry.name)
            plan.last = row["slot_time"] if row else None
        for plan in self.plans:
            if plan.entry.boot:
                self._run(plan, Fire(now, "boot"))
        self.started = True

    def tick(self, now: datetime) -> None:
        """Fire every entry whose latest slot at or before `now` is new and due."""
        if not self.started:
            self.start(now)
        for plan in self.plans:
            fire = decide(plan.slots, now, plan.last, grace_seconds=self.settings.schedule_misfire_grace_seconds, catch_up=plan.entry.catch_up)
            if fire is None:
                continue
            if fire.kind == "skip":
                if plan.last is not None:  # with no history the entry is new here, not behind
                    log.warning("schedule entry %r: slot %s was missed while no scheduler ran; catch_up='skip' drops it", plan.entry.name, stamp(fire.slot))
            else:
                self._run(plan, fire)
            plan.last = fire.slot
        self._prune(now)

    def _run(self, plan: Plan, fire: Fire) -> None:
        entry = plan.entry
        try:
            if fire.kind == "boot":
                job = self.store.boot(entry, fire, self.settings.schedule_boot_window_seconds)
            else:
                job = self.store.fire(entry, fire)
        except psycopg.Error:
            raise  # the database's problem: the loop backs off and retries this slot
        except Exception as exc:  # this entry's problem: log it, keep the others firing
            log.error("schedule entry %r: %s %s not enqueued: %s", entry.name, fire.kind, stamp(fire.slot), exc,
                      exc_info=not isinstance(exc, QueueWorkflowsError))
            return
        if job is None:
            log.debug("schedule entry %r: %s %s already taken by another replica", entry.name, fire.kind, stamp(fire.slot))
            return
        self.enqueued.append(job)
        log.info("schedule entry %r: %s %s enqueued as ingest job %s on %r", entry.name, fire.kind, stamp(fire.slot), job["id"], entry.queue)

    def _prune(self, now: datetime) -> None:
        if self._pruned_at is not None and now - self._pruned_at < PRUNE_EVERY:
            return
        self._pruned_at = now
        removed = self.store.prune(now - timedelta(days=self.settings.schedule_keep_days))
        if removed:
            log.info("pruned %d schedule slot row(s) older than %d days", removed, self.settings.schedule_keep_days)

    def next_wake(self, now: datetime) -> datetime | None:
        """The earliest slot after `now` over every entry (None without entries)."""
        return min((plan.slots.next_after(now) for plan in self.plans), default=None)

    def run_forever(self) -> int:
        """Tick, sleep to the next slot, repeat; returns 0 once `sleep_fn` says stop."""
        backoff = Backoff(initial=0.5, maximum=30.0)
        health = HealthStamp(self.settings.health_file)
        while True:
            try:
                ticked_at = self.now_fn()
                self.tick(ticked_at)
                health.touch("scheduler ticked on the database clock")  # at least every MAX_SLEEP
                # The next slot after the tick's own time: one that came due while the tick
                # ran (a slow start, a slow database) is fired at once instead of dropped.
                wake = self.next_wake(ticked_at)
                delay = MAX_SLEEP if wake is None else (wake - self.now_fn()).total_seconds()
                backoff.reset()
            except psycopg.Error as exc:
                delay = backoff.next_delay()
                log.warning("scheduler: database error (%s); retrying in %.1fs", " ".join(str(exc).split()) or type(exc).__name__, delay)
            if self.sleep_fn(min(max(delay, MIN_SLEEP), MAX_SLEEP)):
                return 0
