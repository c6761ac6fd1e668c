"""Schedule entries and the process's schedule: `ScheduleEntry`, `set_ingest_schedule`.

An entry says *when* (a minute past every hour, optionally only in some `hours`, or a cron
expression), *what* (a registered ingest task on a configured ingest queue, with fixed
`args`) and two policies: what to do about slots missed while no scheduler ran
(`catch_up`), and whether to kick the task once when the scheduler starts (`boot`).

What can be checked from the entry alone (minute, hours, cron text, time zone, policy) is
checked when it is built, so a typo fails on the line that made it. What depends on the
process (the task registry, the configured queues, the payload limit) is checked by
`set_ingest_schedule`, which also refuses two entries with one name. Every error names the
entry and is raised before the schedule changes.
"""

from __future__ import annotations

import re
import threading
from collections.abc import Iterable, Mapping
from collections.abc import Set as AbstractSet
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any, Literal

from cronsim import CronSim, CronSimError

from queue_workflows import config, node_queue, tasks
from queue_workflows.errors import QueueWorkflowsError
from queue_workflows.payloads import json_object, shown
from queue_workflows.settings import iana_zone

CatchUp = Literal["skip", "latest"]
CATCH_UP_POLICIES: tuple[str, ...] = ("skip", "latest")
ENTRY_NAME_RE = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_.:-]{0,63}$")
MAX_CRON_CHARS = 120


class InvalidScheduleError(QueueWorkflowsError, ValueError):
    """A schedule entry is malformed (name, minute, hours, cron text, time zone, policy), or two share a name."""


def check_cron(expression: object) -> str:
    """A five-field cron expression cronsim accepts, or ValueError with cronsim's reason."""
    if not isinstance(expression, str) or not 0 < len(expression) <= MAX_CRON_CHARS:
        raise ValueError(f"cron text must be a string of 1 to {MAX_CRON_CHARS} characters, not {shown(expression)}")
    fields = expression.split()
    if len(fields) != 5:
        raise ValueError(f"bad cron text {expression!r}: want 5 fields (minute hour day-of-month month day-of-week), got {len(fields)}")
    try:
        CronSim(expression, datetime(2000, 1, 1, tzinfo=UTC))
    except (CronSimError, ValueError) as exc:
        raise ValueError(f"bad cron text {expression!r}: {exc}") from None
    return " ".join(fields)


@dataclass(frozen=True)
class ScheduleEntry:
    """Enqueue `task_name` on `queue` at `minute` past every hour, or only in `hours`.

    `ScheduleEntry("fetch", 37, "run_fetch_all", "fetch")` fires at hh:37 every hour;
    `hours=frozenset({6})` only at 06:37. Times are in `timezone` (default: the
    `QW_SCHEDULE_TIMEZONE` setting, itself UTC by default). `ScheduleEntry.cron(...)` takes a
    cron expression instead. `catch_up="latest"` runs the most recent slot missed while no
    scheduler ran (once, never a burst); `"skip"` drops missed slots. `boot=True` also
    enqueues the task once when the scheduler starts.
    """

    name: str
    minute: int | None
    task_name: str
    queue: str
    hours: AbstractSet[int] | None = None
    args: Mapping[str, Any] | None = None
    catch_up: CatchUp = "skip"
    boot: bool = False
    timezone: str | None = None
    expression: str | None = field(default=None, repr=False)

    def __post_init__(self) -> None:
        label = f"schedule entry {shown(self.name)}"
        if not isinstance(self.name, str) or not ENTRY_NAME_RE.match(self.name):
            raise InvalidScheduleError(f"{label}: the name must be 1 to 64 letters, digits or _ . : - (starting with a letter, digit or _)")
        try:
            self._check_when()
        except ValueError as exc:
            raise InvalidScheduleError(f"{label}: {exc}") from None
        if self.catch_up not in CATCH_UP_POLICIES:
            raise InvalidScheduleError(f"{label}: catch_up must be 'skip' or 'latest', not {shown(self.catch_up)}")
        if not isinstance(self.boot, bool):
            raise InvalidScheduleError(f"{label}: boot must be True or False, not {shown(self.boot)}")

    def _check_when(self) -> None:
        if self.expression is not None:
            if self.minute is not None or self.hours is not None:
                raise ValueError("give either a cron expression or minute/hours, not both")
            object.__setattr__(self, "expression", check_cron(self.expression))
        else:
            minute = self.minute
            if isinstance(minute, bool) or not isinstance(minute, int) or not 0 <= minute <= 59:
                raise ValueError(f"minute must be an integer from 0 to 59, not {shown(minute)}")
            if self.hours is not None:
                object.__setattr__(self, "hours", _check_hours(self.hours))
        if self.timezone is not None:
            iana_zone(self.timezone)

    @classmethod
    def cron(
        cls,
        expression: str,
        name: str,
        task_name: str,
        queue: str,
        args: Mapping[str, Any] | None = None,
        *,
        catch_up: CatchUp = "skip",
        boot: bool = False,
        timezone: str | None = None,
    ) -> ScheduleEntry:
        """An entry on a five-field cron expression, e.g. `ScheduleEntry.cron("*/5 * * * *", "poll", "run_poll", "fetch")`."""
        return cls(name, None, task_name, queue, None, args, catch_up, boot, timezone, expression)

    @property
    def cron_expression(self) -> str:
        """The entry as a cron expression: minute/hours become `"37 6 * * *"`."""
        if self.expression is not None:
            return self.expression
        hours = ",".join(str(h) for h in sorted(self.hours)) if self.hours is not None else "*"
        return f"{self.minute} {hours} * * *"

    def zone_name(self, default: str | None = None) -> str:
        """The entry's time zone, else `default`, else the `QW_SCHEDULE_TIMEZONE` setting."""
        return self.timezone or default or config.current().settings.schedule_timezone


def _check_hours(hours: object) -> frozenset[int]:
    if isinstance(hours, (str, bytes, Mapping)) or not isinstance(hours, Iterable):
        raise ValueError(f"hours must be a set of integers from 0 to 23, not {shown(hours)}")
    values = list(hours)
    bad = [h for h in values if isinstance(h, bool) or not isinstance(h, int) or not 0 <= h <= 23]
    if bad or not values:
        problem = f"hour {shown(bad[0])} is out of range" if bad else "no hour given"
        raise ValueError(f"hours must be a non-empty set of integers from 0 to 23 ({problem}); use hours=None for every hour")
    return frozenset(values)


def check_entry(entry: object, index: int | None = None) -> ScheduleEntry:
    """`entry` checked against this process: task registered, queue configured, args storable."""
    if not isinstance(entry, ScheduleEntry):
        where = f"schedule item #{index}" if index is not None else "schedule item"
        raise InvalidScheduleError(f"{where} is a {type(entry).__name__}, not a ScheduleEntry")
    try:
        tasks.check_task_name(entry.task_name)
        tasks.get_ingest_task(entry.task_name)
        node_queue.check_ingest_queue(entry.queue)
        json_object(dict(entry.args) if isinstance(entry.args, Mapping) else entry.args, what="args", max_bytes=config.current().settings.max_payload_bytes)
    except QueueWorkflowsError as exc:
        raise type(exc)(f"schedule entry {entry.name!r}: {exc}") from None
    return entry


_lock = threading.Lock()
_schedule: tuple[ScheduleEntry, ...] = ()


def set_ingest_schedule(entries: Iterable[ScheduleEntry]) -> tuple[ScheduleEntry, ...]:
    """Replace the process's schedule, all or nothing: the first bad entry raises and nothing changes.

    Raises UnknownTaskError (task not registered), UnknownQueueError/ReservedQueueError (queue
    not a configured ingest queue), InvalidPayloadError (args) or InvalidScheduleError
    (duplicate name, not a ScheduleEntry), each naming the entry.
    """
    try:
        items = list(entries)
    except TypeError:
        raise InvalidScheduleError(f"set_ingest_schedule() takes a list of ScheduleEntry, not {type(entries).__name__}") from None
    seen: set[str] = set()
    for index, entry in enumerate(items):
        check_entry(entry, index)
        if entry.name in seen:
            raise InvalidScheduleError(f"duplicate schedule entry name {entry.name!r}: each entry needs its own name (it keys the entry's slots)")
        seen.add(entry.name)
    global _schedule
    with _lock:
        _schedule = tuple(items)
    return _schedule


def ingest_schedule() -> tuple[ScheduleEntry, ...]:
    """The schedule last set by `set_ingest_schedule` (empty until then)."""
    with _lock:
        return _schedule


def clear_ingest_schedule() -> None:
    global _schedule
    with _lock:
        _schedule = ()
