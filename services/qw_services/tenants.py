"""`qw tenants`: per-tenant queued, running and served share of each queue, and the weights behind them.

Exit codes: 0 done; 1 the database failed; 2 a bad tenant or weight (nothing changed).
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

from rich import box
from rich.table import Table

from queue_workflows import InvalidPayloadError, clear_tenant_weight, set_tenant_weight, tenant_shares

from .tables import print_table

COMMANDS = ("tenants",)


def add_commands(sub: Any, parents: list[argparse.ArgumentParser]) -> None:
    tenants = sub.add_parser("tenants", parents=parents, help="per-tenant queued/running/served share per queue; set a tenant's weight")
    tenants.add_argument("--queue", default=None, help="only this queue")
    tenants.add_argument("--json", action="store_true")
    tenants.add_argument("--weight", nargs=2, metavar=("TENANT", "WEIGHT"), default=None,
                         help="serve TENANT in proportion to WEIGHT (above 0, at most 10000; default 1) from the next claim on")
    tenants.add_argument("--clear-weight", metavar="TENANT", default=None, help="back to the default weight 1")


def run(args: argparse.Namespace) -> int:
    try:
        if args.weight is not None:
            tenant, text = args.weight
            try:
                weight: Any = float(text)
            except ValueError:
                weight = text
            set_tenant_weight(tenant, weight)
            print(f"tenant {tenant!r}: weight {float(weight):g}")
            return 0
        if args.clear_weight is not None:
            cleared = clear_tenant_weight(args.clear_weight)
            print(f"tenant {args.clear_weight!r}: weight 1" + ("" if cleared else " (it had none set)"))
            return 0
    except InvalidPayloadError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    rows = tenant_shares(queue=args.queue)
    if args.json:
        print(json.dumps(rows, indent=2, sort_keys=True, default=str))
    else:
        print_table(shares_table(rows))
    return 0


def shares_table(rows: list[dict[str, Any]]) -> Table:
    table = Table(box=box.SIMPLE_HEAD, show_edge=False, pad_edge=False)
    for column in ("queue", "tenant", "queued", "running", "weight", "served", "served share", "weight share"):
        table.add_column(column, no_wrap=True)
    for r in rows:
        shares = [f"{float(v):.1%}" if v is not None else "-" for v in (r["served_share"], r["weight_share"])]
        table.add_row(r["queue"], r["tenant"], str(r["queued"]), str(r["running"]), f"{r['weight']:g}", str(r["served"]), *shares)
    return table


def status_lines(rows: list[dict[str, Any]], *, shown: int = 3) -> list[str]:
    """`qw status`: per queue where two tenants or more have work, the most served ones' shares against their weights'."""
    with_work: dict[str, list[dict[str, Any]]] = {}
    for r in rows:
        if r["queued"] or r["running"]:
            with_work.setdefault(r["queue"], []).append(r)
    lines = []
    for queue, tenants in sorted(with_work.items()):
        if len(tenants) < 2:
            continue
        top = sorted(tenants, key=lambda r: (-r["served"], r["tenant"]))[:shown]
        parts = [f"{r['tenant']} {r['queued']} queued, served {_share(r['served_share'])} (weight {_share(r['weight_share'])})" for r in top]
        more = f"; {len(tenants) - len(top)} more" if len(tenants) > len(top) else ""
        lines.append(f"fair share on {queue}: {len(tenants)} tenants with work: {'; '.join(parts)}{more} (qw tenants)")
    return lines


def _share(value: Any) -> str:
    return "-" if value is None else f"{float(value):.1%}"

