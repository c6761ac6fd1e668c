"""An example application for the stack's images: one ingest task and its schedule, registered at import (QW_APP)."""

from __future__ import annotations

from typing import Any

from queue_workflows import ScheduleEntry, current, register_ingest_task, set_ingest_schedule


def word_count(reason: str, args: dict[str, Any]) -> dict[str, Any]:
    """Count the words of `text`: what a real task's body would be, in one line."""
    return {"words": len(str(args.get("text", "")).split()), "reason": reason}


register_ingest_task("example.word_count", word_count)

# Every service imports QW_APP, the head's scheduler included, and it refuses to run an app with
# no schedule: this one counts a line at the top of every hour on one of the stack's ingest queues.
_queues = current().settings.ingest_queues
set_ingest_schedule([ScheduleEntry.cron("0 * * * *", "example.hourly_count", "example.word_count",
                                        "fetch" if "fetch" in _queues else min(_queues), {"text": "once an hour"})])
