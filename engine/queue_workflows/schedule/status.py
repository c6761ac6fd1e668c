"""What `qw schedule` shows: each entry, its next fire time and the last slot enqueued."""

from __future__ import annotations

import threading
from collections.abc import Iterable
from typing import Any

from queue_workflows import config
from queue_workflows.schedule.clock import Clock
from queue_workflows.schedule.entries import ScheduleEntry, ingest_schedule
from queue_workflows.schedule.slots import Slots, stamp
from queue_workflows.schedule.store import ALL_KINDS, SlotStore


def schedule_status(entries: Iterable[ScheduleEntry] | None = None, *, url: str | None = None) -> list[dict[str, Any]]:
    """One JSON-able dict per entry (default: the process's schedule), times as `...Z` strings.

    `next_fire` is computed on the scheduler's clock (the database's); `last_slot`,
    `last_kind` and `last_job_id` come from the slot ledger, whichever replica wrote them.
    """
    items = list(ingest_schedule() if entries is None else entries)
    settings = config.current().settings
    store = SlotStore(url=url, replica="qw-schedule")
    try:
        now = Clock.from_settings(store.db_now, threading.Event(), settings).now()
        last = store.last_slots(ALL_KINDS)
    finally:
        store.close()
    rows = []
    for entry in items:
        zone_name = entry.zone_name(settings.schedule_timezone)
        done = last.get(entry.name)
        rows.append(
            {
                "name": entry.name,
                "task": entry.task_name,
                "queue": entry.queue,
                "cron": entry.cron_expression,
                "timezone": zone_name,
                "catch_up": entry.catch_up,
                "boot": entry.boot,
                "next_fire": stamp(Slots.of(entry.cron_expression, zone_name).next_after(now)),
                "last_slot": stamp(done["slot_time"]) if done else None,
                "last_kind": done["kind"] if done else None,
                "last_job_id": done["job_id"] if done else None,
            }
        )
    return rows
