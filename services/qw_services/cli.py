"""`qw`: the operator and developer command line."""

from __future__ import annotations

import argparse
import json
from collections.abc import Sequence

from queue_workflows import app_loader, db, scheduler
from queue_workflows.control import commands as worker_control
from queue_workflows.ops import status

from . import costs, health, keys, models, ops, tenants
from .dashboard import service as dashboard_service
from .tables import print_table, schedule_table, status_table


# An orchestrator beats every second: silent this long, it is gone (its row waits to be pruned).
def _status(as_json: bool) -> int:
    data = status.status_data()
    if as_json:
        print(json.dumps(data, indent=2, sort_keys=True, default=str))
        return 0
    print_table(status_table({"node": data["node"], "ingest": data["ingest"]}, oldest=data["oldest_queued_s"]))
    if data["workers"]:
        print_table(ops.workers_table(data["workers"]))
    if data["orchestrators"]:
        print_table(ops.orchestrators_table(data["orchestrators"]))
    else:
        print("no orchestrator is running: nothing reclaims lost jobs or advances DAG runs (start queue-orchestrator)")
    for line in keys.status_lines(data["flow"]) + tenants.status_lines(data["tenants"]):
        print(line)
    for warning in data["warnings"]:
        print(f"WARNING: {warning}")
    for w in data["workers"]:
        if w["last_flagged_dead_at"]:
            print(f"DEAD WORKER? {w['worker_id']} (host {w['host_label']}, queue {w['queue']}, pid {w['pid']}): "
                  f"no heartbeat for {w['last_seen_s']:.0f}s while owning a running job; restart it on {w['host_label']}")
    return 0


def _schedule(as_json: bool) -> int:
    rows = scheduler.schedule_status()
    if as_json:
        print(json.dumps(rows, indent=2, sort_keys=True))
    elif rows:
        print_table(schedule_table(rows))
    else:
        print("no schedule entries: the app module (--app or QW_APP) sets them with set_ingest_schedule([...])")
    return 0


def _migrate(to: int | None) -> int:
    if to is None:
        print(f"applied: {db.bootstrap() or 'nothing new'}")
    else:
        print(f"reverted: {db.downgrade(to) or 'nothing'}")
    return 0


def build_parser() -> argparse.ArgumentParser:
    app_help = "application module imported first; its configure() applies (default: QW_APP)"
    parser = app_loader.ToolParser(prog="qw", description="queue_workflows command line")
    parser.add_argument("--app", default=None, help=app_help)
    # Also accepted after the subcommand; SUPPRESS keeps a missing one from hiding the global one.
    app_too = app_loader.ToolParser(add_help=False)
    app_too.add_argument("--app", default=argparse.SUPPRESS, help=app_help)
    sub = parser.add_subparsers(dest="command", required=True)
    dev = sub.add_parser("dev", parents=[app_too], help="run orchestrator + workers + demo app (embedded Postgres if QW_DATABASE_URL is unset)")
    dev.add_argument("--jobs", type=int, default=20, help="demo jobs per queue (default 20)")
    dev.add_argument("--exit-when-done", action="store_true", help="stop once the demo work has finished")
    dev.add_argument("--timeout", type=float, default=300.0, help="give up if the demo has not finished by then")
    dev.add_argument("-v", "--verbose", action="store_true", help="every process's log (a line per job) instead of the live summary line")
    migrate = sub.add_parser("migrate", parents=[app_too], help="apply the migration chain (or --to VERSION to downgrade)")
    migrate.add_argument("--to", type=int, default=None)
    status = sub.add_parser("status", parents=[app_too], help="queues (depth, oldest job), workers, flagged dead workers")
    status.add_argument("--json", action="store_true")
    schedule = sub.add_parser("schedule", parents=[app_too], help="the app's schedule: each entry's next fire time and last slot enqueued")
    schedule.add_argument("--json", action="store_true")
    web = sub.add_parser("web", parents=[app_too], help="serve the operator dashboard, as queue-dashboard does (docs/dashboard.md)")
    dashboard_service.add_arguments(web)
    health_cmd = sub.add_parser("health", parents=[app_too], help="exit 0 while this container's worker/orchestrator beats (a HEALTHCHECK)")
    health.add_arguments(health_cmd)
    ops.add_commands(sub, [app_too])
    tenants.add_commands(sub, [app_too])
    keys.add_command(sub, [app_too])
    models.add_command(sub, [app_too])
    costs.add_command(sub, [app_too])
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    if args.command == "dev":
        from .dev import run

        return app_loader.run_tool(lambda: run(jobs=args.jobs, exit_when_done=args.exit_when_done, timeout=args.timeout, app=args.app,
                                                  verbose=args.verbose))
    if args.command == "web":  # the dashboard service: its own logging, its own serving loop
        return dashboard_service.main_with(args)
    if args.command == "health":  # its own exit codes: Docker reads 0 healthy, 1 not
        return health.main_with(args)
    if args.command == "worker":  # the same action as queue-worker-control, owned by the engine
        return worker_control.run_switch(args.switch, args)
    return app_loader.run_tool(lambda: _command(args))


def _command(args: argparse.Namespace) -> int:
    loaded = app_loader.load_app(args.app)
    # One connection first: a bad DSN, a missing database or schema is one line, not a pool timeout.
    db.check_database(url=loaded.config.database_url(), schema=args.command != "migrate")
    if args.command == "migrate":
        return _migrate(args.to)
    if args.command == "schedule":
        return _schedule(args.json)
    if args.command in ops.COMMANDS:
        return ops.run(args)
    if args.command in tenants.COMMANDS:
        return tenants.run(args)
    if args.command == keys.COMMAND:
        return keys.run(args)
    if args.command == models.COMMAND:
        return models.run(args)
    if args.command == costs.COMMAND:
        return costs.run(args)
    return _status(args.json)


if __name__ == "__main__":
    raise SystemExit(main())
