"""The scheduler, by responsibility: entries and the schedule (`entries`), pure slot math
(`slots`), the database clock (`clock`), the slot ledger (`store`), the loop (`ticker`), the
process (`service`) and the listing (`status`). `queue_workflows.scheduler` is the public face.
"""

from __future__ import annotations

from queue_workflows.schedule.entries import (
    InvalidScheduleError,
    ScheduleEntry,
    clear_ingest_schedule,
    ingest_schedule,
    set_ingest_schedule,
)
from queue_workflows.schedule.service import main, run, run_once
from queue_workflows.schedule.slots import Fire, Slots, decide
from queue_workflows.schedule.status import schedule_status
from queue_workflows.schedule.store import SlotStore
from queue_workflows.schedule.ticker import Ticker

__all__ = [
    "Fire",
    "InvalidScheduleError",
    "ScheduleEntry",
    "SlotStore",
    "Slots",
    "Ticker",
    "clear_ingest_schedule",
    "decide",
    "ingest_schedule",
    "main",
    "run",
    "run_once",
    "schedule_status",
    "set_ingest_schedule",
]
