"""`qw health worker|orchestrator|schema`: a container HEALTHCHECK that means something.

A process that exists is not a service that works: a worker is healthy while its own row in
worker_heartbeats is fresh, an orchestrator while its own qw_orchestrators row is, and the
scheduler (which keeps no row) while its database answers at this package's schema version.
Exit 0 healthy, 1 unhealthy with one line on stderr saying why.
"""

from __future__ import annotations

import argparse
import socket
import sys
from collections.abc import Callable, Sequence
from typing import Any

import psutil

from queue_workflows import app_loader, config, db
from queue_workflows.common import sqlfile
from queue_workflows.worker.liveness import id_notes

_HEALTH = sqlfile.load("qw_services", "health.sql")

__all__ = ["add_arguments", "check_orchestrator", "check_schema", "check_worker", "main_with", "worker_pids"]

ORCHESTRATOR_FRESH_SECONDS = 10.0
"""Orchestrators beat about once a second; ten missed beats is a wedged or cut-off one."""
START_SLACK_SECONDS = 30.0
"""How far the database's clock and this host's may disagree about when a worker started."""
WORKER_COMMANDS = ("queue-claim-worker", "queue_workflows.claim_worker", "queue_workflows.worker.cli", "qw_services.worker")


class Unhealthy(Exception):
    """Why the check failed, as the one line a HEALTHCHECK log shows."""


def _rows(statement: str, params: dict[str, Any]) -> list[dict[str, Any]]:
    with db.connect(autocommit=True) as conn:
        return list(conn.execute(statement, params).fetchall())


def worker_pids() -> dict[int, float]:
    """This PID namespace's claim-worker processes (a container's own), with their start times."""
    found: dict[int, float] = {}
    for proc in psutil.process_iter(["pid", "cmdline", "create_time"]):
        cmdline = " ".join(proc.info["cmdline"] or ())
        if any(name in cmdline for name in WORKER_COMMANDS) and "health" not in cmdline:
            found[proc.info["pid"]] = proc.info["create_time"]
    return found


def check_worker(queue: str | None = None, *, pids: Callable[[], dict[int, float]] = worker_pids) -> str:
    """This container's worker row is fresh: within three heartbeats (at least one lease)."""
    settings = config.current().settings
    local = pids()
    if not local:
        raise Unhealthy("no claim-worker process runs here")
    notes = {pid: found for pid, started in local.items() if (found := id_notes.read_note(pid, started))}
    # On a host (not in a container) workers of other databases run beside ours (`qw dev` in
    # another terminal): a worker that noted another database, or whose older note names a worker
    # this database never had, is none of this check's business.
    here = id_notes.database_key(config.current().database_url())
    undated = [found.worker_id for found in notes.values() if not found.database]
    known = {r["worker_id"] for r in _rows(_HEALTH["worker_rows_by_id"], {"worker_ids": undated, "queue": None})} if undated else set()
    foreign = {pid for pid, found in notes.items() if found.database not in ("", here) or (not found.database and found.worker_id not in known)}
    if foreign and not set(local) - foreign:
        raise Unhealthy(f"no claim-worker process of this database runs here ({len(foreign)} of other databases)")
    local = {pid: started for pid, started in local.items() if pid not in foreign}
    ids = {pid: found.worker_id for pid, found in notes.items() if pid not in foreign}
    noted = list(ids.values())
    # A worker that noted its id names its row; the workers without a note are matched by pid and
    # start time, and a noted worker never by its pid.
    mine = _rows(_HEALTH["worker_rows_by_id"], {"worker_ids": noted, "queue": queue}) if noted else []
    unnoted = {pid: started for pid, started in local.items() if pid not in ids}
    if not mine and unnoted:
        local = unnoted
        rows = _rows(_HEALTH["worker_rows"], {"host_label": settings.host_label, "pids": list(local), "queue": queue})
        # Replicas on one host can share a pid: ours started no earlier than our process did, and
        # of those, nearest to it (a replica scaled up seconds later has the same pid).
        mine = sorted((r for r in rows if r["started_epoch"] >= local[r["pid"]] - START_SLACK_SECONDS),
                      key=lambda r: abs(r["started_epoch"] - local[r["pid"]]))
    if not mine:
        where = f"host {settings.host_label!r}" + (f", queue {queue!r}" if queue else "")
        if noted:
            raise Unhealthy(f"no worker_heartbeats row for this worker ({where}, worker {', '.join(noted)}): not registered yet, or removed")
        # Processes that noted nothing (starting up, or older) are this database's only if a row says so.
        raise Unhealthy(f"no claim-worker process of this database runs here: no worker_heartbeats row for pids {sorted(local)} "
                        f"({where}): another database's, not registered yet, or removed")
    row = mine[0]
    fresh = max(3 * settings.heartbeat_seconds, settings.lease_seconds)
    if row["silent_seconds"] > fresh:
        raise Unhealthy(f"worker {row['worker_id']} last beat {row['silent_seconds']:.0f}s ago (limit {fresh:g}s)")
    return f"worker {row['worker_id']} ({row['state']}) beat {row['silent_seconds']:.1f}s ago"


def check_orchestrator(hostname: str | None = None) -> str:
    """This container's orchestrator, leading or standing by, beat within ten seconds."""
    name = hostname or socket.gethostname()
    rows = _rows(_HEALTH["orchestrator_row"], {"hostname": name})
    if not rows:
        raise Unhealthy(f"no qw_orchestrators row for hostname {name!r}: not started yet, or it stopped beating")
    row = rows[0]
    if row["silent_seconds"] > ORCHESTRATOR_FRESH_SECONDS:
        raise Unhealthy(f"orchestrator {row['orchestrator_id']} last beat {row['silent_seconds']:.0f}s ago")
    return f"orchestrator {row['orchestrator_id']} ({row['role']}) beat {row['silent_seconds']:.1f}s ago"


def check_schema() -> str:
    """The database answers and carries this package's migrations."""
    return f"database at schema version {db.check_database()}"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("role", choices=("worker", "orchestrator", "schema"))
    parser.add_argument("--queue", default=None, help="worker: only this queue's row (default: any of this container's)")


def main_with(args: argparse.Namespace) -> int:
    def body() -> int:
        app_loader.load_app(args.app)
        try:
            if args.role == "worker":
                said = check_worker(args.queue)
            elif args.role == "orchestrator":
                said = check_orchestrator()
            else:
                said = check_schema()
        except Unhealthy as exc:
            print(f"unhealthy: {exc}", file=sys.stderr)
            return 1
        print(f"healthy: {said}")
        return 0

    code = app_loader.run_tool(body)
    return 0 if code == 0 else 1  # Docker reads any non-zero as unhealthy; 1 is its documented value


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="qw health")
    parser.add_argument("--app", default=None)
    add_arguments(parser)
    return main_with(parser.parse_args(argv))
