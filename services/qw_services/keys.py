"""`qw keys`: flow limits and their keys (docs/flow_control.md): list, set, clear.

Exit codes as the other operator commands: 0 done; 2 a bad limit (nothing changed).
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

from rich import box
from rich.table import Table

from queue_workflows import InvalidNameError, InvalidPayloadError
from queue_workflows.ops import flow

from .tables import print_table

COMMAND = "keys"


def add_command(sub: Any, parents: list[argparse.ArgumentParser]) -> None:
    keys = sub.add_parser(COMMAND, parents=parents, help="flow limits and their keys: running vs limit, tokens; set or clear a limit")
    keys.add_argument("action", nargs="?", choices=("list", "set", "clear"), default="list")
    keys.add_argument("queue", nargs="?", default=None, help="set/clear: the queue")
    keys.add_argument("--task", default="*", help="set/clear: one task of the queue (default '*': the whole queue)")
    keys.add_argument("--max-running", type=int, default=None, help="set: jobs of one key running at once, across every worker")
    keys.add_argument("--rate", default=None, help="set: starts per key, 'N/interval' (e.g. 10/s, 600/min)")
    keys.add_argument("--key-path", default=None, help="set: where a job without a concurrency_key finds its key (e.g. args.basin)")
    keys.add_argument("--limit", type=int, default=200, help="list: at most this many keys")
    keys.add_argument("--json", action="store_true")


def run(args: argparse.Namespace) -> int:
    try:
        return _run(args)
    except (InvalidNameError, InvalidPayloadError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2


def _run(args: argparse.Namespace) -> int:
    if args.action in ("set", "clear") and args.queue is None:
        raise InvalidPayloadError(f"qw keys {args.action}: name the queue (qw keys {args.action} QUEUE ...)")
    if args.action == "set":
        row = flow.set_flow_limit(args.queue, task=args.task, max_running=args.max_running, rate=args.rate, key_path=args.key_path)
        print(json.dumps(row, default=str) if args.json else f"limit set on queue {args.queue!r}, task {args.task!r}: {_limit_text(row)}")
        return 0
    if args.action == "clear":
        gone = flow.clear_flow_limit(args.queue, task=args.task)
        print(json.dumps({"cleared": gone}) if args.json else ("limit cleared" if gone else f"no limit on queue {args.queue!r}, task {args.task!r}"))
        return 0
    limits, keys = flow.flow_limits(), flow.flow_keys(limit=args.limit)
    if args.json:
        print(json.dumps({"limits": limits, "keys": keys}, indent=2, sort_keys=True, default=str))
        return 0
    if not limits:
        print("no flow limits (qw keys set QUEUE --max-running N [--rate N/s] [--key-path args.x])")
    else:
        print_table(limits_table(limits))
    if keys:
        print_table(keys_table(keys))
    return 0


def _limit_text(row: dict[str, Any]) -> str:
    parts = []
    if row["max_running"] is not None:
        parts.append(f"max_running {row['max_running']}")
    if row["rate_count"] is not None:
        parts.append(f"rate {row['rate_count']}/{row['rate_seconds']:g}s")
    parts.append(f"key {row['key_path'] or 'concurrency_key'}")
    return ", ".join(parts)


def limits_table(rows: list[dict[str, Any]]) -> Table:
    table = Table(title="flow limits", box=box.SIMPLE)
    for column in ("queue", "task", "limit"):
        table.add_column(column)
    for row in rows:
        table.add_row(row["queue"], row["task"], _limit_text(row))
    return table


def keys_table(rows: list[dict[str, Any]]) -> Table:
    table = Table(title="keys", box=box.SIMPLE)
    for column in ("queue", "task", "key", "running", "tokens"):
        table.add_column(column)
    for row in rows:
        limit = "-" if row["max_running"] is None else str(row["max_running"])
        tokens = "-" if row["tokens"] is None else f"{row['tokens']}/{row['rate_count']}"
        table.add_row(row["queue"], row["task"], row["key"] or "''", f"{row['running']}/{limit}", tokens)
    return table


def status_lines(summary: list[dict[str, Any]]) -> list[str]:
    """`qw status`: one line per limited queue."""
    return [f"flow limits on {s['queue']}: {s['limits']} limit(s), {s['running']} running under them on {s['keys_running']} key(s), "
            f"{s['keys_full']} key(s) at their limit (qw keys)" for s in summary]
