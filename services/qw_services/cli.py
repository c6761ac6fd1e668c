"""`qw`: the operator and developer command line."""

from __future__ import annotations

import argparse
import json
from collections.abc import Sequence
from typing import Any

from queue_workflows import app_loader, db, node_queue

from .tables import print_table, status_table


def status_data() -> dict[str, Any]:
    return {"node": node_queue.snapshot()["queues"], "ingest": node_queue.ingest_snapshot()["queues"]}


def _status(as_json: bool) -> int:
    data = status_data()
    if as_json:
        print(json.dumps(data, indent=2, sort_keys=True))
    else:
        print_table(status_table(data))
    return 0


def _migrate(to: int | None) -> int:
    if to is None:
        print(f"applied: {db.bootstrap() or 'nothing new'}")
    else:
        print(f"reverted: {db.downgrade(to) or 'nothing'}")
    return 0


def build_parser() -> argparse.ArgumentParser:
    app_help = "application module imported first; its configure() applies (default: QW_APP)"
    parser = argparse.ArgumentParser(prog="qw", description="queue_workflows command line")
    parser.add_argument("--app", default=None, help=app_help)
    # Also accepted after the subcommand; SUPPRESS keeps a missing one from hiding the global one.
    app_too = argparse.ArgumentParser(add_help=False)
    app_too.add_argument("--app", default=argparse.SUPPRESS, help=app_help)
    sub = parser.add_subparsers(dest="command", required=True)
    dev = sub.add_parser("dev", parents=[app_too], help="run orchestrator + workers + demo app (embedded Postgres if QW_DATABASE_URL is unset)")
    dev.add_argument("--jobs", type=int, default=20, help="demo jobs per queue (default 20)")
    dev.add_argument("--exit-when-done", action="store_true", help="stop once the demo work has finished")
    dev.add_argument("--timeout", type=float, default=300.0, help="give up if the demo has not finished by then")
    migrate = sub.add_parser("migrate", parents=[app_too], help="apply the migration chain (or --to VERSION to downgrade)")
    migrate.add_argument("--to", type=int, default=None)
    status = sub.add_parser("status", parents=[app_too], help="queue depth and live workers per queue")
    status.add_argument("--json", action="store_true")
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    if args.command == "dev":
        from .dev import run

        return app_loader.run_tool(lambda: run(jobs=args.jobs, exit_when_done=args.exit_when_done, timeout=args.timeout, app=args.app))
    return app_loader.run_tool(lambda: _command(args))


def _command(args: argparse.Namespace) -> int:
    loaded = app_loader.load_app(args.app)
    # One connection first: a bad DSN, a missing database or schema is one line, not a pool timeout.
    db.check_database(url=loaded.config.database_url(), schema=args.command == "status")
    if args.command == "migrate":
        return _migrate(args.to)
    return _status(args.json)


if __name__ == "__main__":
    raise SystemExit(main())
