"""`qw`: the operator and developer command line."""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence

import psycopg

import queue_workflows
from queue_workflows import ConfigError, QueueWorkflowsError, db, node_queue


def _status(as_json: bool) -> int:
    data = {"node": node_queue.snapshot()["queues"], "ingest": node_queue.ingest_snapshot()["queues"]}
    if as_json:
        print(json.dumps(data, indent=2, sort_keys=True))
        return 0
    columns = ("queued", "running", "completed", "failed", "workers")
    print(f"{'family':<8}{'queue':<12}" + "".join(f"{c:>11}" for c in columns))
    for family, queues in data.items():
        for queue, counts in queues.items():
            print(f"{family:<8}{queue:<12}" + "".join(f"{counts[c]:>11}" for c in columns))
    return 0


def _migrate(to: int | None) -> int:
    if to is None:
        print(f"applied: {db.bootstrap() or 'nothing new'}")
    else:
        print(f"reverted: {db.downgrade(to) or 'nothing'}")
    return 0


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="qw", description="queue_workflows command line")
    sub = parser.add_subparsers(dest="command", required=True)
    dev = sub.add_parser("dev", help="run orchestrator + workers + demo app (embedded Postgres if QW_DATABASE_URL is unset)")
    dev.add_argument("--jobs", type=int, default=20, help="demo jobs per queue (default 20)")
    dev.add_argument("--exit-when-done", action="store_true", help="stop once the demo work has finished")
    dev.add_argument("--timeout", type=float, default=300.0, help="give up if the demo has not finished by then")
    migrate = sub.add_parser("migrate", help="apply the migration chain (or --to VERSION to downgrade)")
    migrate.add_argument("--to", type=int, default=None)
    status = sub.add_parser("status", help="queue depth and live workers per queue")
    status.add_argument("--json", action="store_true")
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        if args.command == "dev":
            from .dev import run

            return run(jobs=args.jobs, exit_when_done=args.exit_when_done, timeout=args.timeout)
        queue_workflows.configure().database_url()
        db.connect().close()  # fail fast and clearly; the pool would wait its full checkout timeout
        if args.command == "migrate":
            return _migrate(args.to)
        return _status(args.json)
    except ConfigError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    except (QueueWorkflowsError, psycopg.OperationalError) as exc:
        print(f"error: {str(exc).strip()}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    raise SystemExit(main())
