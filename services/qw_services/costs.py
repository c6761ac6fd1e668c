"""`qw costs`: what finished jobs cost per tenant, queue, task, model or host, as a table, JSON or chargeback CSV.

Exit codes: 0 done; 1 the database failed; 2 a bad --since/--until/--by (nothing read).
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

from rich import box
from rich.table import Table

from queue_workflows.ops import costs

from .tables import print_table

COMMAND = "costs"


def add_command(sub: Any, parents: list[argparse.ArgumentParser]) -> None:
    cmd = sub.add_parser(COMMAND, parents=parents,
                         help="CPU-, GPU- and wall-seconds, peak VRAM/RSS and model loads of finished jobs, per group (docs/metrics.md)")
    cmd.add_argument("--since", default=costs.DEFAULT_SINCE, help="from: a duration back from now (30m, 12h, 7d, 2w), a date or an ISO time (default 7d)")
    cmd.add_argument("--until", default=None, help="to (excluded), in the same forms (default now)")
    cmd.add_argument("--by", default="tenant", help=f"group by: {', '.join(costs.GROUP_BY)} (default tenant)")
    form = cmd.add_mutually_exclusive_group()
    form.add_argument("--json", action="store_true", help="the report as one JSON object")
    form.add_argument("--csv", action="store_true", help="chargeback CSV: a header row, one row per group")


def run(args: argparse.Namespace) -> int:
    report = costs.cost_report(by=args.by, since=args.since, until=args.until)
    if args.json:
        print(json.dumps(costs.to_json(report), indent=2, sort_keys=True, default=str))
    elif args.csv:
        sys.stdout.write(costs.to_csv(report))
    else:
        print(f"jobs finished from {report['since']:%Y-%m-%d %H:%M:%S%z} to {report['until']:%Y-%m-%d %H:%M:%S%z}, by {report['by']}")
        print_table(costs_table(report))
        if report["truncated"]:
            print(f"only the {len(report['groups'])} costliest groups are shown; the total counts them all")
    return 0


def _num(value: float | None, digits: int = 1) -> str:
    return "-" if value is None else f"{value:,.{digits}f}"


def _gb(value: float | None) -> str:
    return "-" if value is None else f"{value / 1e9:.2f}"


def _rate(value: float | None) -> str:
    return "-" if value is None else f"{value:.0%}"


def costs_table(report: dict[str, Any]) -> Table:
    table = Table(box=box.SIMPLE_HEAD, show_edge=False, pad_edge=False, show_footer=report["totals"] is not None)
    columns = (report["by"], "jobs", "failed", "CPU s", "GPU s", "wall s", "VRAM p50 GB", "VRAM p95 GB", "VRAM max GB",
               "RSS p95 GB", "load s", "hit rate")
    totals = report["totals"]
    for i, column in enumerate(columns):
        footer = "" if totals is None else ("total" if i == 0 else _cells(totals)[i - 1])
        table.add_column(column, footer=footer, no_wrap=True, justify="left" if i == 0 else "right")
    for g in report["groups"]:
        table.add_row("-" if g["group"] is None else str(g["group"]), *_cells(g))
    return table


def _cells(g: dict[str, Any]) -> list[str]:
    return [str(g["jobs"]), str(g["failed"]), _num(g["cpu_seconds"]), _num(g["gpu_seconds"]), _num(g["wall_seconds"]),
            _gb(g["peak_vram_p50_bytes"]), _gb(g["peak_vram_p95_bytes"]), _gb(g["peak_vram_max_bytes"]),
            _gb(g["peak_rss_p95_bytes"]), _num(g["model_load_seconds"]), _rate(g["model_hit_rate"])]
