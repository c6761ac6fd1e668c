"""Flow limits (docs/flow_control.md): set, clear and list per-key concurrency limits and rate limits.

A limit lives in `flow_limits`, so plain SQL may change it too (its CHECK constraints refuse
what these functions refuse); every claim reads it, so a change holds from the next claim on.
"""

from __future__ import annotations

import math
import re
from typing import Any

from psycopg.rows import dict_row

from queue_workflows import db
from queue_workflows.common import sqlfile
from queue_workflows.errors import InvalidNameError, InvalidPayloadError
from queue_workflows.payloads import shown

_FLOW = sqlfile.load("queue_workflows.ops", "flow.sql")

_NAME_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_.:-]{0,127}$")
_PATH_RE = re.compile(r"^args(\.[A-Za-z0-9_-]{1,64}){1,8}$")
_RATE_RE = re.compile(r"^\s*([0-9]+)\s*/\s*([0-9]*\.?[0-9]*)\s*(ms|s|sec|m|min|h|hour)?\s*$")
_UNIT_SECONDS = {"ms": 0.001, "s": 1.0, "sec": 1.0, "m": 60.0, "min": 60.0, "h": 3600.0, "hour": 3600.0}
MAX_RATE_SECONDS = 86400.0


def parse_rate(text: str) -> tuple[int, float]:
    """`"10/s"`, `"100/2.5s"`, `"600/min"`: (tokens, seconds over which they refill)."""
    match = _RATE_RE.match(text) if isinstance(text, str) else None
    if match is None:
        raise InvalidPayloadError(f"rate {shown(text)} is not 'N/interval' (e.g. '10/s', '100/2.5s', '600/min')")
    count, amount, unit = int(match[1]), match[2], match[3] or "s"
    if amount in ("", "."):
        amount = "1"
    return count, float(amount) * _UNIT_SECONDS[unit]


def _check(queue: object, task: object, key_path: object, max_running: object, rate: tuple[int, float] | None) -> None:
    """Every refusal names the limit (queue and task) and the bad value; nothing is written before."""
    where = f"flow limit on queue {shown(queue)}"
    if not isinstance(queue, str) or not _NAME_RE.match(queue):
        raise InvalidNameError(f"{where}: the queue name is invalid (letters, digits and _ . : -, max 128)")
    where += "" if task == "*" else f", task {shown(task)}"
    if task != "*" and (not isinstance(task, str) or not _NAME_RE.match(task)):
        raise InvalidNameError(f"{where}: the task name is invalid (letters, digits and _ . : -, max 128, or '*' for the whole queue)")
    if key_path is not None and (not isinstance(key_path, str) or not _PATH_RE.match(key_path)):
        raise InvalidPayloadError(f"{where}: key_path {shown(key_path)} must look like 'args.basin' (args, then 1 to 8 field names)")
    if max_running is not None and (isinstance(max_running, bool) or not isinstance(max_running, int) or not 0 <= max_running <= 2**31 - 1):
        raise InvalidPayloadError(f"{where}: max_running must be a whole number 0 or more, not {shown(max_running)}")
    if rate is not None:
        count, seconds = rate
        if not 1 <= count <= 2**31 - 1:
            raise InvalidPayloadError(f"{where}: a rate needs at least 1 token per interval, not {count}")
        if not math.isfinite(seconds) or not 0 < seconds <= MAX_RATE_SECONDS:
            raise InvalidPayloadError(f"{where}: a rate's interval must be more than 0 and at most a day, not {seconds}s")
    if max_running is None and rate is None:
        raise InvalidPayloadError(f"{where}: give max_running, a rate, or both (clear_flow_limit removes a limit)")


def set_flow_limit(queue: str, *, task: str = "*", max_running: int | None = None, rate: str | tuple[int, float] | None = None,
                   key_path: str | None = None, conn: db.Conn | None = None) -> dict[str, Any]:
    """Limit each key of `queue` (or of one `task` on it): at most `max_running` at once, and/or `rate`
    ('N/interval') starts. A job's key is its `concurrency_key`, else its args at `key_path`, else ''
    (so with neither, the limit caps the whole queue or task). Replaces the limit there was."""
    try:
        parsed = parse_rate(rate) if isinstance(rate, str) else rate
    except InvalidPayloadError as exc:
        raise InvalidPayloadError(f"flow limit on queue {shown(queue)}, task {shown(task)}: {exc}") from None
    _check(queue, task, key_path, max_running, parsed)
    params = {"queue": queue, "task": task, "key_path": key_path, "max_running": max_running,
              "rate_count": parsed[0] if parsed else None, "rate_seconds": parsed[1] if parsed else None}
    with db.transaction(conn) as c:
        row = c.cursor(row_factory=dict_row).execute(_FLOW.sql("upsert_flow_limit"), params).fetchone()
    assert row is not None
    return row


def clear_flow_limit(queue: str, *, task: str = "*", conn: db.Conn | None = None) -> bool:
    """Remove a limit; its keys' jobs are claimed freely from the next claim on. False when there was none."""
    with db.transaction(conn) as c:
        return c.execute(_FLOW.sql("delete_flow_limit"), {"queue": queue, "task": task}).fetchone() is not None


def flow_limits(conn: db.Conn | None = None) -> list[dict[str, Any]]:
    with db.transaction(conn) as c:
        return c.cursor(row_factory=dict_row).execute(_FLOW.sql("list_flow_limits")).fetchall()


def flow_keys(limit: int = 200, conn: db.Conn | None = None) -> list[dict[str, Any]]:
    """Keys in use, busiest first per limit: running against max_running, and tokens left now."""
    with db.transaction(conn) as c:
        return c.cursor(row_factory=dict_row).execute(_FLOW.sql("list_flow_keys"), {"limit": limit}).fetchall()


def flow_summary(conn: db.Conn | None = None) -> list[dict[str, Any]]:
    """Per limited queue: limits, keys running, jobs running under limits, keys at their limit (`qw status`)."""
    with db.transaction(conn) as c:
        return c.cursor(row_factory=dict_row).execute(_FLOW.sql("flow_summary")).fetchall()


__all__ = ["clear_flow_limit", "flow_keys", "flow_limits", "flow_summary", "parse_rate", "set_flow_limit"]
