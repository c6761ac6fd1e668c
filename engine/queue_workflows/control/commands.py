"""Turn one (host, queue) worker OFF or ON, from Python, the command line, or plain SQL.

    worker_control.disable_worker("spark", "gpu")          # hard stop: requeue its job, exit 79, stay parked
    worker_control.disable_worker("spark", "gpu", "park")  # finish the current job, then stop claiming
    worker_control.enable_worker("spark", "gpu")           # resume in place, no restart
    worker_control.desired_state_for("spark", "gpu")       # 'on' | 'off' (no row: 'on')

    queue-worker-control --queue gpu --off [--host spark] [--policy hard|park]
    queue-worker-control --queue gpu --on  [--host spark]

The worker hears the change at once (a trigger NOTIFYs it) and re-reads its row at every
heartbeat in case a notification was lost. See docs/worker_control.md.
"""

from __future__ import annotations

import argparse
import getpass
import json
import logging
import socket
import sys
from collections.abc import Sequence
from typing import Any

from queue_workflows import app_loader, db, node_queue
from queue_workflows.control.api import POLICIES, check_switch, desired_state_for, disable_worker, enable_worker, list_controls
from queue_workflows.ops import admin

__all__ = ["add_switch_options", "desired_state_for", "disable_worker", "enable_worker", "list_controls", "main", "run_switch", "switch_from_shell"]

log = logging.getLogger(__name__)


def build_parser() -> argparse.ArgumentParser:
    parser = app_loader.ToolParser(prog="queue-worker-control", description="Turn one (host, queue) worker OFF or ON.")
    state = parser.add_mutually_exclusive_group(required=True)
    state.add_argument("--off", action="store_true", help="turn the worker OFF")
    state.add_argument("--on", action="store_true", help="turn the worker back ON")
    add_switch_options(parser)
    parser.add_argument("--app", default=None, help="application module imported first; its configure() applies (default: QW_APP)")
    return parser


def add_switch_options(parser: argparse.ArgumentParser) -> None:
    """The options of `queue-worker-control` and `qw worker on|off`, defined once so they cannot drift."""
    parser.add_argument("--queue", required=True, help="cpu, gpu, or a configured ingest queue")
    parser.add_argument("--host", default=None, help="the worker's host label (default: this host's QW_HOST_LABEL)")
    parser.add_argument("--policy", choices=POLICIES, default="hard",
                        help="with off: hard = requeue the running job and exit (default); park = finish it first")
    parser.add_argument("--reason", default=None, help="a note kept with the switch")
    parser.add_argument("--json", action="store_true", help="print the resulting row as JSON")


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    return run_switch("off" if args.off else "on", args)


def run_switch(state: str, args: argparse.Namespace) -> int:
    """The action behind both commands, from parsed `add_switch_options` (and `--app`) to exit code:
    0 done, 1 the database failed, 2 bad input or configuration (one `error:` line, nothing written)."""
    return app_loader.run_tool(lambda: _switch(state, args))


def _switch(state: str, args: argparse.Namespace) -> int:
    settings = app_loader.load_app(args.app).config.settings  # the app's configure() decides the database
    row = switch_from_shell(state, args.queue, args.host, default_host=settings.host_label, policy=args.policy, reason=args.reason)
    print(json.dumps(row, indent=2, sort_keys=True, default=str) if args.json else describe(row))
    return 0


def switch_from_shell(state: str, queue: str, host: str | None, *, default_host: str, policy: str = "hard",
                      reason: str | None = None) -> dict[str, Any]:
    """Check every argument, then the database and its schema, warn on stderr when no worker has
    that host label, then write the switch; returns the row.

    `host=None` means this host (`default_host`); an empty or invalid one is refused, never
    taken for this host.
    """
    host = default_host if host is None else host
    if queue not in node_queue.NODE_QUEUES:
        node_queue.check_ingest_queue(queue)
    who = f"{getpass.getuser()}@{socket.gethostname()}"
    check_switch(host, queue, policy, requested_by=who, reason=reason)
    db.check_database()  # arguments first: bad input is exit 2 whether or not the database answers
    if not any(w["host_label"] == host for w in admin.worker_list()):
        print(f"warning: no worker on host {host!r} has a heartbeat row; is the host label right? (the switch is kept for when it starts)",
              file=sys.stderr)
    if state == "off":
        return disable_worker(host, queue, policy, requested_by=who, reason=reason)  # type: ignore[arg-type]
    return enable_worker(host, queue, requested_by=who, reason=reason)


def describe(row: dict[str, Any]) -> str:
    """One line for a switch row: `host/queue: OFF (hard)` or `host/queue: ON`."""
    policy = f" ({row['stop_policy']})" if row["desired_state"] == "off" else ""
    return f"{row['host_label']}/{row['queue']}: {row['desired_state'].upper()}{policy}"


if __name__ == "__main__":
    raise SystemExit(main())
