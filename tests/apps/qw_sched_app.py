"""The schedule the multi-process scheduler tests run (imported via QW_APP, with a compressed clock)."""

from __future__ import annotations

import qw_test_app  # noqa: F401 - registers the test tasks (noop, record, ...)

from queue_workflows import ScheduleEntry, set_ingest_schedule

set_ingest_schedule(
    [
        ScheduleEntry.cron("* * * * *", "each-minute", "noop", "fetch", catch_up="latest"),
        ScheduleEntry.cron("* * * * *", "each-minute-skip", "noop", "load", catch_up="skip"),
        ScheduleEntry("boot-kick", 0, "noop", "alpha", hours={3}, boot=True),
    ]
)
