"""The cost report: CPU-, GPU- and wall-seconds, peak memory and model loads of finished jobs, per group.

Read from the per-job accounting the worker stamps on every finished job (docs/gpu.md); `qw costs`
and the dashboard's Costs page both call `cost_report()`, and `to_csv()` is the chargeback file.
"""

from __future__ import annotations

import csv
import io
import re
from collections.abc import Callable
from datetime import UTC, date, datetime, timedelta
from typing import Any

from psycopg.rows import dict_row

from queue_workflows import db
from queue_workflows.common import sqlfile
from queue_workflows.errors import InvalidPayloadError
from queue_workflows.payloads import shown

_COSTS = sqlfile.load("queue_workflows.ops", "costs.sql")

GROUP_BY = ("tenant", "queue", "task", "model", "host")
DEFAULT_SINCE = "7d"
MAX_GROUPS = 1000  # past this the rest are left out (and `truncated` says so): a report, not a dump
METRICS = (
    "jobs", "completed", "failed", "cancelled", "cpu_seconds", "gpu_seconds", "wall_seconds",
    "peak_vram_p50_bytes", "peak_vram_p95_bytes", "peak_vram_max_bytes", "peak_rss_p95_bytes",
    "model_load_seconds", "model_loads", "model_hits", "model_hit_rate",
)
CSV_COLUMNS = ("by", "group", *METRICS, "since", "until")
"""The chargeback file's header, in order; a column is only ever added at the end (docs/metrics.md)."""

_DURATION = re.compile(r"^([0-9]{1,6})([smhdw])$")
_UNIT_SECONDS = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 7 * 86400}


def parse_when(text: str, *, now: datetime, what: str = "--since") -> datetime:
    """`7d` (s, m, h, d, w: that long before `now`), an ISO date or an ISO time (UTC unless it names a zone)."""
    raw = str(text).strip()
    if match := _DURATION.match(raw):
        return now - timedelta(seconds=int(match.group(1)) * _UNIT_SECONDS[match.group(2)])
    try:
        if re.fullmatch(r"[0-9]{4}-[0-9]{2}-[0-9]{2}", raw):
            parsed = datetime.combine(date.fromisoformat(raw), datetime.min.time())
        else:
            parsed = datetime.fromisoformat(raw)
    except ValueError:
        raise InvalidPayloadError(
            f"{what} {shown(raw)} is not a time: use a duration back from now (30m, 12h, 7d, 2w), a date (2026-11-01) "
            "or an ISO time (2026-11-01T08:00:00+00:00)") from None
    return parsed if parsed.tzinfo is not None else parsed.replace(tzinfo=UTC)


def window(since: str | None = None, until: str | None = None, *, now_fn: Callable[[], datetime] = lambda: datetime.now(UTC)) -> tuple[datetime, datetime]:
    """[since, until): since defaults to 7 days back, until to now; an empty or reversed window is refused."""
    now = now_fn()
    start = parse_when(since or DEFAULT_SINCE, now=now, what="--since")
    end = parse_when(until, now=now, what="--until") if until else now
    if start >= end:
        raise InvalidPayloadError(f"--since ({start.isoformat()}) must be before --until ({end.isoformat()})")
    return start, end


def check_by(by: str) -> str:
    if by not in GROUP_BY:
        raise InvalidPayloadError(f"--by {shown(by)} is not a grouping: use one of {', '.join(GROUP_BY)}")
    return by


def cost_report(by: str = "tenant", since: str | None = None, until: str | None = None, *, limit: int = MAX_GROUPS,
                conn: db.Conn | None = None, now_fn: Callable[[], datetime] = lambda: datetime.now(UTC)) -> dict[str, Any]:
    """Per group (`by`): counts, seconds, memory percentiles and model loads of the jobs finished in the window.

    `groups` is ordered by GPU-seconds, then CPU-seconds; `totals` covers every job in the window,
    the groups past `limit` included (`truncated` is true then). Bad input raises before any read.
    """
    check_by(by)
    start, end = window(since, until, now_fn=now_fn)
    params = {"by": by, "since": start, "until": end, "limit": limit + 2}  # the totals row, and one more to see a cut
    with db.transaction(conn) as c:
        rows = c.cursor(row_factory=dict_row).execute(_COSTS["cost_report"], params).fetchall()
    totals = next((r for r in rows if r["is_total"]), None)
    groups = [r for r in rows if not r["is_total"]]
    return {
        "by": by, "since": start, "until": end,
        "groups": [_clean(r) for r in groups[:limit]],
        "totals": _clean(totals) if totals is not None else None,
        "truncated": len(groups) > limit,
    }


def _clean(row: dict[str, Any]) -> dict[str, Any]:
    return {"group": row["group"], **{k: row[k] for k in METRICS}}


def to_csv(report: dict[str, Any]) -> str:
    """One header row (CSV_COLUMNS), one row per group; an empty cell is a figure no job had (no VRAM read, no model)."""
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\n")
    writer.writerow(CSV_COLUMNS)
    since, until = report["since"].isoformat(), report["until"].isoformat()
    for group in report["groups"]:
        writer.writerow([report["by"], *("" if group[k] is None else group[k] for k in ("group", *METRICS)), since, until])
    return out.getvalue()


def to_json(report: dict[str, Any]) -> dict[str, Any]:
    """The report with its times as ISO strings (what `qw costs --json` prints and the dashboard serves)."""
    return {**report, "since": report["since"].isoformat(), "until": report["until"].isoformat()}
