"""The operator's `qw` subcommands: workers, jobs, one job, runs, one run, cancel, retry, restart, input, event, worker on|off.

Exit codes scripts can rely on: 0 done; 1 the database failed; 2 bad input or configuration;
3 no such job, or the job is not in a state that allows the action; 141 the reader of stdout closed early (`| head`).
"""

from __future__ import annotations

import argparse
import getpass
import json
import socket
import sys
from datetime import datetime
from typing import Any

from rich import box
from rich.table import Table

from queue_workflows import (
    InvalidNameError,
    InvalidPayloadError,
    cancel_run,
    node_queue,
    restart_run,
    run_actions,
    run_status,
    send_event,
    submit_input,
)
from queue_workflows.control import commands as worker_control
from queue_workflows.dag import InputNotAwaitedError, RunStateError
from queue_workflows.errors import UnknownQueueError
from queue_workflows.ops import admin

from .tables import age, print_table, waiting_for

EXIT_NOT_FOUND = 3
COMMANDS = ("jobs", "job", "cancel", "retry", "workers", "runs", "run", "restart", "input", "event")  # `worker` runs control.commands.run_switch


def add_commands(sub: Any, parents: list[argparse.ArgumentParser]) -> None:
    workers = sub.add_parser("workers", parents=parents, help="every worker: host, queue, state, current job, last seen")
    workers.add_argument("--json", action="store_true")
    jobs = sub.add_parser("jobs", parents=parents, help="recent jobs, newest first")
    jobs.add_argument("--queue", default=None)
    jobs.add_argument("--status", default=None, choices=admin.STATUSES)
    jobs.add_argument("--limit", type=int, default=50)
    jobs.add_argument("--json", action="store_true")
    job = sub.add_parser("job", parents=parents, help="one job: its row and its event history (ID, ingest:ID or node:ID)")
    job.add_argument("ref")
    job.add_argument("--json", action="store_true")
    cancel = sub.add_parser("cancel", parents=parents, help="cancel a job (ID, ingest:ID, node:ID) or a workflow run (run:ID)")
    cancel.add_argument("ref")
    cancel.add_argument("--reason", default=None)
    cancel.add_argument("--hard", action="store_true", help="run:ID only: also stop its running nodes now (their workers exit 77)")
    cancel.add_argument("--json", action="store_true")
    retry = sub.add_parser("retry", parents=parents, help="put a failed or cancelled job back with fresh attempts")
    retry.add_argument("ref")
    retry.add_argument("--json", action="store_true")
    runs = sub.add_parser("runs", parents=parents, help="workflow runs, newest first, with node counts")
    runs.add_argument("--status", default=None, choices=admin.RUN_STATUSES)
    runs.add_argument("--limit", type=int, default=50)
    runs.add_argument("--json", action="store_true")
    run = sub.add_parser("run", parents=parents, help="one workflow run: every node's state, attempts and output")
    run.add_argument("run_id", type=int)
    run.add_argument("--json", action="store_true")
    restart = sub.add_parser("restart", parents=parents, help="restart a failed or cancelled run: only its unfinished nodes run again")
    restart.add_argument("run_id", type=int)
    restart.add_argument("--json", action="store_true")
    given = sub.add_parser("input", parents=parents, help="answer a run's input step with a JSON object")
    given.add_argument("run_id", type=int)
    given.add_argument("node")
    given.add_argument("--value", required=True, help='a JSON object, e.g. \'{"approved": true}\'')
    given.add_argument("--json", action="store_true")
    event = sub.add_parser("event", parents=parents, help="send an event to the wait_event nodes waiting on KEY (the first event wins)")
    event.add_argument("key")
    event.add_argument("payload", help='a JSON object, the waiting node\'s output, e.g. \'{"approved": true}\'')
    event.add_argument("--run", type=int, default=None, help="only this run's waiter")
    event.add_argument("--json", action="store_true")
    worker = sub.add_parser("worker", parents=parents, help="turn one (host, queue) worker on or off")
    worker.add_argument("switch", choices=("on", "off"))
    worker_control.add_switch_options(worker)  # the engine owns the action: queue-worker-control runs the same code


def run(args: argparse.Namespace) -> int:
    try:
        return _run(args)
    except admin.JobNotFoundError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return EXIT_NOT_FOUND
    except (InvalidNameError, InvalidPayloadError, UnknownQueueError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2


def _run(args: argparse.Namespace) -> int:
    if args.command == "workers":
        return _show(admin.worker_list(), args.json, workers_table)
    if args.command == "jobs":
        if args.queue is not None and args.queue not in node_queue.NODE_QUEUES:
            node_queue.check_ingest_queue(args.queue)
        return _show(admin.list_jobs(args.queue, args.status, args.limit), args.json, jobs_table)
    if args.command == "job":
        detail = admin.job_detail(args.ref)
        if args.json:
            return _dump(detail)
        print_table(job_table(detail))
        if detail["events"]:
            print_table(events_table(detail["events"]))
        return 0
    if args.command == "runs":
        return _show(admin.list_runs(args.status, args.limit), args.json, runs_table)
    if args.command == "run":
        try:
            status = run_status(args.run_id)
        except LookupError as exc:
            raise admin.JobNotFoundError(str(exc)) from None
        actions = run_actions(args.run_id)
        if args.json:
            return _dump({**status, "actions": actions})
        print(f"run {status['id']} ({status['workflow_name']}): {status['status']}" + (f" - {status['error']}" if status["error"] else ""))
        if status["parent_run_id"] is not None:
            print(f"child of run {status['parent_run_id']} (node {status['parent_node']}), depth {status['depth']}: qw run {status['parent_run_id']}")
        print_table(nodes_table(status["nodes"]))
        for name, node in status["nodes"].items():
            if node.get("child_run_id") is not None:
                print(f"node {name} -> child run {node['child_run_id']} ({node['child_status']}): qw run {node['child_run_id']}")
        if actions:
            print_table(actions_table(actions))
        return 0
    if args.command == "cancel" and args.ref.startswith("run:"):
        return _run_action(lambda: cancel_run(_run_id(args.ref), reason=args.reason, hard=args.hard, requested_by=_operator()), args.json, "cancelled")
    if args.command == "cancel":
        return _one(admin.cancel_job(args.ref, reason=args.reason), args.json, "cancelled")
    if args.command == "restart":
        return _run_action(lambda: restart_run(args.run_id, requested_by=_operator()), args.json, "restarted")
    if args.command == "input":
        try:
            value = json.loads(args.value)
        except ValueError as exc:
            raise InvalidPayloadError(f"--value is not JSON: {exc}") from None
        return _run_action(lambda: {"run_id": args.run_id, "submission": submit_input(args.run_id, args.node, value, requested_by=_operator())},
                           args.json, "input submitted")
    if args.command == "event":
        return _event(args)
    return _one(admin.retry_job(args.ref), args.json, "queued again")


def _event(args: argparse.Namespace) -> int:
    """Send it and print what became of it: applied to which nodes, kept for a node to come, or rejected and why."""
    try:
        payload = json.loads(args.payload)
    except ValueError as exc:
        raise InvalidPayloadError(f"the payload is not JSON: {exc}") from None
    try:
        row = send_event(args.key, payload, run_id=args.run, requested_by=_operator())
    except RunStateError as exc:
        raise admin.JobNotFoundError(str(exc)) from None
    if args.json:
        _dump(row)
    elif row["status"] == "applied":
        print(f"event {row['id']}: applied to node job(s) {', '.join(str(i) for i in row['applied_to'])}")
    elif row["status"] == "kept":
        print(f"event {row['id']}: kept (no node waits on {args.key!r} yet: the first one to wait takes it)")
    else:
        print(f"event {row['id']}: rejected: {row['error']}")
    return EXIT_NOT_FOUND if row["status"] == "rejected" else 0


def _run_id(ref: str) -> int:
    text = ref.removeprefix("run:")
    if not text.isdigit() or not 0 < int(text) < 2**63:
        raise InvalidNameError(f"run reference {ref[:40]!r} is invalid: use run:ID")
    return int(text)


def _operator() -> str:
    """Who an action from this shell is recorded as (`requested_by`)."""
    return f"{getpass.getuser()}@{socket.gethostname()}"


def _run_action(action: Any, as_json: bool, what: str) -> int:
    try:
        result = action()
    except (RunStateError, InputNotAwaitedError, LookupError) as exc:
        raise admin.JobNotFoundError(str(exc)) from None
    if as_json:
        return _dump(result)
    detail = ", ".join(f"{k} {v}" for k, v in result.items() if k != "run_id")
    print(f"run {result['run_id']}: {what}" + (f" ({detail})" if detail else ""))
    return 0


def _dump(data: Any) -> int:
    print(json.dumps(data, indent=2, sort_keys=True, default=str))
    return 0


def _show(rows: list[dict[str, Any]], as_json: bool, render: Any) -> int:
    if as_json:
        return _dump(rows)
    print_table(render(rows))
    return 0


def _one(row: dict[str, Any], as_json: bool, what: str) -> int:
    if as_json:
        return _dump(row)
    print(f"job {row['id']} on {row['queue']!r}: {what}")
    return 0


def _table(*columns: str) -> Table:
    table = Table(box=box.SIMPLE_HEAD, show_edge=False, pad_edge=False)
    for column in columns:
        table.add_column(column, no_wrap=True)
    return table


def _when(value: datetime | None) -> str:
    return value.strftime("%Y-%m-%d %H:%M:%S") if value else "-"


def workers_table(rows: list[dict[str, Any]]) -> Table:
    table = _table("host", "queue", "pid", "state", "job", "last seen", "connected", "flag")
    for r in rows:
        flag = "DEAD?" if r["last_flagged_dead_at"] else ""
        # A worker no session speaks for is gone (its row awaits pruning): its last state is history.
        state = r["state"] if r["connected"] else "gone"
        job = str(r["current_job_id"]) if r["connected"] and r["state"] == "busy" and r["current_job_id"] else "-"
        table.add_row(r["host_label"], r["queue"], str(r["pid"]), state, job, age(r["last_seen_s"]), "yes" if r["connected"] else "no", flag)
    return table


def orchestrators_table(rows: list[dict[str, Any]]) -> Table:
    table = _table("orchestrator", "host", "pid", "role", "term", "last beat")
    for r in rows:
        table.add_row(r["orchestrator_id"], r["host_label"], str(r["pid"]), r["role"], "-" if r["epoch"] is None else str(r["epoch"]),
                      age(r["silent_seconds"]))
    return table


def jobs_table(rows: list[dict[str, Any]]) -> Table:
    table = _table("job", "queue", "name", "status", "attempts", "created", "error")
    for r in rows:
        error = (r["error"] or "").strip().splitlines()[-1:] or [""]
        table.add_row(f"{r['family']}:{r['id']}", r["queue"], r["name"], r["status"], f"{r['attempts']}/{r['max_attempts']}",
                      _when(r["created_at"]), error[0][:80])
    return table


# What the job cost (queue_workflows.worker.usage), shown when recorded.
USAGE_FIELDS = ("wall_seconds", "cpu_seconds", "peak_rss_bytes", "peak_vram_bytes", "model_load_seconds", "model_hit")


def job_table(detail: dict[str, Any]) -> Table:
    job = detail["job"]
    table = _table("field", "value")
    table.add_row("job", detail["ref"])
    for key in ("queue", "task_name", "node_name", "status", "attempts", "max_attempts", "watchdog_trips", "claimed_by",
                "created_at", "started_at", "finished_at", "run_after", "dedup_key", "unassignable_reason",
                *USAGE_FIELDS, "args", "inputs", "result", "context_delta", "error"):
        if key in job and job[key] is not None:
            value = job[key]
            text = json.dumps(value, default=str) if isinstance(value, (dict, list)) else _when(value) if isinstance(value, datetime) else str(value)
            table.add_row(key, text if key != "error" else text[-2000:])
    return table


def events_table(events: list[dict[str, Any]]) -> Table:
    table = _table("at", "from", "to", "attempts", "worker", "error")
    for e in events:
        error = (e["error"] or "").strip().splitlines()[-1:] or [""]
        table.add_row(_when(e["at"]), e["from_status"] or "-", e["to_status"], str(e["attempts"]), e["worker_id"] or "-", error[0][:80])
    return table


def runs_table(rows: list[dict[str, Any]]) -> Table:
    table = _table("run", "workflow", "status", "done", "active", "failed", "parent", "created", "error")
    for r in rows:
        error = (r["error"] or "").strip().splitlines()[-1:] or [""]
        parent = f"run:{r['parent_run_id']} {r['parent_node']}" if r["parent_run_id"] is not None else "-"
        table.add_row(str(r["id"]), r["workflow_name"], r["status"], f"{r['completed']}/{r['nodes_total']}", str(r["active"]),
                      str(r["failed"]), parent, _when(r["created_at"]), error[0][:80])
    return table


def nodes_table(nodes: dict[str, dict[str, Any]]) -> Table:
    table = _table("node", "status", "attempts", "queue", "job", "output / error")
    for name, n in nodes.items():
        waits = waiting_for(n)
        detail = [waits] if waits else (n["error"] or "").strip().splitlines()[-1:] if n["error"] else [json.dumps(n["output"], default=str)[:80] if n["output"] is not None else ""]
        if n.get("map"):  # a map's items are not rows of this table: its progress stands in for its (long) output
            detail = [map_progress(n["map"]) + (f"; {detail[0]}" if n["error"] and detail else "")]
        table.add_row(name, n["status"], str(n["attempts"]), n["queue"] or "-", f"run:{n['child_run_id']}" if n.get("child_run_id") else f"node:{n['job_id']}" if n["job_id"] else "-", (detail or [""])[0][:80])
    return table


def map_progress(progress: dict[str, int]) -> str:
    """A map node's items as `done/running/failed of N`."""
    return f"{progress['done']}/{progress['running']}/{progress['failed']} of {progress['total']} done/running/failed"


def actions_table(actions: list[dict[str, Any]]) -> Table:
    table = _table("at", "action", "node", "by", "detail")
    for a in actions:
        table.add_row(_when(a["at"]), a["action"], a["node_name"] or "-", a["requested_by"] or "-", (a["detail"] or "")[:80])
    return table
