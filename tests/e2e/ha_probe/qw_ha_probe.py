"""The failover test's app: tasks, a DAG node and a schedule that record each execution's start and end, so the test can see two runs of one unit of work overlap."""

from __future__ import annotations

import json
import os
import socket
import time
import uuid
from typing import Any

from queue_workflows import ScheduleEntry, Workflow, register_ingest_task, register_node_callable, set_ingest_schedule


def _record(entry: dict[str, Any]) -> None:
    # One short O_APPEND write per line: lines of several workers never interleave.
    line = (json.dumps(entry) + "\n").encode()
    fd = os.open(os.environ["QW_HA_PROBE_LOG"], os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o666)
    try:
        os.write(fd, line)
    finally:
        os.close(fd)


def _execute(n: Any, seconds: float) -> str:
    run = uuid.uuid4().hex
    where = {"n": n, "run": run, "host": socket.gethostname(), "pid": os.getpid()}
    started = time.time()
    _record({**where, "phase": "start", "t": started})
    # A tick every quarter second: a run whose worker stops mid-way still shows how long it ran.
    while (left := started + seconds - time.time()) > 0:
        time.sleep(min(0.25, left))
        _record({**where, "phase": "tick", "t": time.time()})
    _record({**where, "phase": "end", "t": time.time()})
    return run


def probe(reason: str, args: dict[str, Any]) -> dict[str, Any]:
    return {"n": args["n"], "run": _execute(args["n"], float(args.get("seconds", 0.5)))}


def tick(reason: str, args: dict[str, Any]) -> dict[str, Any]:
    """A schedule slot's job: its reason names the slot (`schedule ha-tick@<slot>`)."""
    return {"run": _execute(reason, 0.2)}


@register_node_callable("ha.step")
def step(tag: str, step: str) -> dict[str, Any]:
    return {"run": _execute(f"{tag}/{step}", 0.3)}


DAG_STEPS = ("a", "b", "c", "d")


def dag() -> Workflow:
    """a, then b and c side by side, then d: each node a recorded execution of its own."""
    wf = Workflow("ha-dag")
    for node, deps in (("a", []), ("b", ["a"]), ("c", ["a"]), ("d", ["b", "c"])):
        wf = wf.node(node, "ha.step", deps=deps, inputs={"tag": {"$from": "tag"}, "step": node})
    return wf


register_ingest_task("ha.probe", probe)
register_ingest_task("ha.tick", tick)
# Every minute of the scheduler's clock, which the test runs QW_SCHEDULE_TIME_SCALE times faster.
set_ingest_schedule([ScheduleEntry.cron("* * * * *", "ha-tick", "ha.tick", "fetch", catch_up="latest")])
