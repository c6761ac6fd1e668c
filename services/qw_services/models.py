"""`qw models`: per gpu model, the VRAM its workers declared, what its jobs' peaks taught, and the need routing uses.

Exit codes: 0 done; 1 the database failed.
"""

from __future__ import annotations

import argparse
import json
from typing import Any

from rich import box
from rich.table import Table

from queue_workflows.gpu.learn import model_needs

from .tables import print_table

COMMAND = "models"


def add_command(sub: Any, parents: list[argparse.ArgumentParser]) -> None:
    models = sub.add_parser(COMMAND, parents=parents, help="per gpu model: declared VRAM, learned peak (p95, with samples), the need used")
    models.add_argument("--json", action="store_true")


def run(args: argparse.Namespace) -> int:
    rows = model_needs()
    if args.json:
        print(json.dumps(rows, indent=2, sort_keys=True, default=str))
    else:
        print_table(needs_table(rows))
    return 0


def _gb(value: float | None) -> str:
    return "-" if value is None else f"{value:.2f}"


def needs_table(rows: list[dict[str, Any]]) -> Table:
    table = Table(box=box.SIMPLE_HEAD, show_edge=False, pad_edge=False)
    for column in ("model", "declared GB", "learned GB", "samples", "OOM raise GB", "need GB"):
        table.add_column(column, no_wrap=True, justify="left" if column == "model" else "right")
    for r in rows:
        table.add_row(r["model"], _gb(r["declared_gb"]), _gb(r["learned_gb"]), str(r["samples"]), _gb(r["oom_gb"]), _gb(r["need_gb"]))
    return table
