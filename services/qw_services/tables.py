"""Terminal tables (rich) for `qw status` and the `qw dev` summary, and the words `qw run` and the dashboard share."""

from __future__ import annotations

import sys
from collections.abc import Mapping, Sequence
from datetime import UTC, datetime
from typing import Any

from rich import box
from rich.console import Console
from rich.table import Table

STATUS_COLUMNS = ("scheduled", "queued", "running", "completed", "failed", "workers")


def status_table(families: Mapping[str, Mapping[str, Mapping[str, Any]]], oldest: Mapping[str, float | None] | None = None) -> Table:
    """One row per (family, queue): job counts by status, live workers, and (when given) the oldest queued job's age."""
    table = Table(box=box.SIMPLE_HEAD, show_edge=False, pad_edge=False)
    table.add_column("family", no_wrap=True)
    table.add_column("queue", no_wrap=True)
    for column in STATUS_COLUMNS:
        table.add_column(column, justify="right", no_wrap=True)
    if oldest is not None:
        table.add_column("oldest", justify="right", no_wrap=True)
    for family, queues in families.items():
        for queue, counts in queues.items():
            cells = [str(counts.get(column, 0)) for column in STATUS_COLUMNS]
            if oldest is not None:
                cells.append(age(oldest.get(queue)))
            table.add_row(family, queue, *cells)
    return table


def age(seconds: float | None) -> str:
    if seconds is None:
        return "-"
    if seconds < 120:
        return f"{seconds:.0f}s"
    return f"{seconds / 60:.0f}m" if seconds < 7200 else f"{seconds / 3600:.1f}h"


SCHEDULE_COLUMNS = ("name", "task", "queue", "cron", "timezone", "catch_up", "boot", "next_fire", "last_slot", "last_kind", "last_job_id")


def schedule_table(rows: Sequence[Mapping[str, Any]]) -> Table:
    """One row per schedule entry (`scheduler.schedule_status()`)."""
    table = Table(box=box.SIMPLE_HEAD, show_edge=False, pad_edge=False)
    for column in SCHEDULE_COLUMNS:
        table.add_column(column.replace("_", " "), no_wrap=True)
    for row in rows:
        table.add_row(*("-" if row[c] is None else "yes" if row[c] is True else "no" if row[c] is False else str(row[c]) for c in SCHEDULE_COLUMNS))
    return table


def print_table(table: Table) -> None:
    """Print to stdout; when piped, wide enough that no column is cut (rich assumes 80)."""
    console = Console(file=sys.stdout, width=None if sys.stdout.isatty() else 200, highlight=False)
    console.print(table)


def waiting_for(node: Mapping[str, Any]) -> str:
    """A sleeping node's wake time, a waiting node's key and timeout; '' for anything else."""
    if node["status"] != "waiting":
        return ""
    if node.get("wake_at") is not None:
        return f"sleeping until {_utc(node['wake_at'])}"
    if node.get("event_key") is not None:
        until = f", timeout at {_utc(node['timeout_at'])}" if node.get("timeout_at") else ""
        return f"waiting for event {node['event_key']!r}{until}"
    return ""


def _utc(value: datetime) -> str:
    return value.astimezone(UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")
