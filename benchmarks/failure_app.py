"""Tasks for benchmarks/failures.py (QW_APP=failure_app): every execution logs itself to a file, outside the database.

Each execution appends JSON lines to $FAILURE_EXEC_LOG: its start, a tick every TICK seconds
while it runs, and its end, stamped with the machine's monotonic clock (one clock for every
process here, a skewed worker's included: libfaketime leaves it alone). A file, not a table, so
an execution is recorded while Postgres is down, full or cut off.
"""

from __future__ import annotations

import json
import os
import select
import time
import uuid
from typing import Any

from queue_workflows import register_ingest_task

TICK = 0.1
EXEC_LOG_ENV = "FAILURE_EXEC_LOG"


def _select_sleep(seconds: float) -> None:
    select.select([], [], [], max(0.0, seconds))


if os.environ.get("FAKETIME"):
    # libfaketime fails clock_nanosleep with EINVAL while the monotonic clock is left real, and
    # time.sleep uses it: a skewed worker sleeps through select instead (as tests/apps/qw_fault_tasks does).
    time.sleep = _select_sleep


class Execution:
    """One run of one job's code, written line by line with O_APPEND (whole lines, never interleaved)."""

    def __init__(self, key: str) -> None:
        self.key, self.id = key, uuid.uuid4().hex[:12]
        self.fd = os.open(os.environ[EXEC_LOG_ENV], os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o666)
        self.mark("s")

    def mark(self, phase: str) -> None:
        line = {"k": self.key, "e": self.id, "p": os.getpid(), "ph": phase, "t": time.monotonic()}
        os.write(self.fd, (json.dumps(line) + "\n").encode())

    def hold(self, seconds: float) -> None:
        """Run for `seconds` of monotonic time, ticking; a resumed (thawed) process returns at once once they are spent."""
        deadline = time.monotonic() + seconds
        while (left := deadline - time.monotonic()) > 0:
            time.sleep(min(TICK, left))
            self.mark("t")

    def end(self) -> None:
        self.mark("e")
        os.close(self.fd)


def load(reason: str, args: dict[str, Any]) -> dict[str, Any]:
    """The steady load's plain job: a few milliseconds of 'work'."""
    run = Execution(str(args["key"]))
    run.hold(float(args.get("seconds", 0.01)))
    run.end()
    return {"pid": os.getpid()}


def probe(reason: str, args: dict[str, Any]) -> dict[str, Any]:
    """A fault's target job: its first execution holds `hold` seconds, later ones `again` (a marker file tells them apart)."""
    run = Execution(str(args["key"]))
    try:
        os.close(os.open(f"{os.environ[EXEC_LOG_ENV]}.{args['key']}", os.O_CREAT | os.O_EXCL | os.O_WRONLY))
        first = True
    except FileExistsError:
        first = False
    run.hold(float(args["hold"]) if first else float(args.get("again", 0.0)))
    run.end()
    return {"pid": os.getpid(), "first": first}


def step(key: str, node: str) -> dict[str, Any]:
    """A DAG node of the steady load (call `failure_app:step`)."""
    run = Execution(f"{key}:{node}")
    run.hold(0.01)
    run.end()
    return {node: os.getpid()}


register_ingest_task("load", load)
register_ingest_task("probe", probe)
