"""Tasks for the frozen, partitioned and skewed host tests (QW_APP=qw_fault_tasks)."""

from __future__ import annotations

import os
import select
import subprocess
import sys
import time
from typing import Any

import psycopg
import qw_test_app  # noqa: F401 - registers the usual test tasks too

from queue_workflows import config, register_ingest_task


def _select_sleep(seconds: float) -> None:
    select.select([], [], [], max(0.0, seconds))


if os.environ.get("FAKETIME"):
    # libfaketime (0.9.10) fails clock_nanosleep with EINVAL when the monotonic clock is left
    # unfaked, and Python's time.sleep uses it: a skewed test worker sleeps through select instead.
    time.sleep = _select_sleep


def _record(token: str, pid: int) -> int:
    """Log one execution of `token` by `pid`; returns how many times it had run before."""
    with psycopg.connect(config.current().database_url(), autocommit=True, connect_timeout=5) as conn:
        before = conn.execute("SELECT count(*) FROM test_executions WHERE token = %s", (token,)).fetchone()[0]  # type: ignore[index]
        conn.execute("INSERT INTO test_executions (token, worker_pid) VALUES (%s, %s)", (token, pid))
    return int(before)


def hold_first(reason: str, args: dict[str, Any]) -> dict[str, Any]:
    """Record the run; the first run holds `hold` seconds (with a child process when `child`), later ones return at once.

    The child records its own pid as a second execution row (token + ':child'), then sleeps.
    """
    token = str(args["token"])
    before = _record(token, os.getpid())
    if before == 0:
        if args.get("child"):
            script = "import sys, time; time.sleep(float(sys.argv[1]))"
            child = subprocess.Popen([sys.executable, "-c", script, str(args["hold"])])
            _record(f"{token}:child", child.pid)
        deadline = time.monotonic() + float(args["hold"])
        while time.monotonic() < deadline:  # short sleeps: a resumed process returns at once once the hold is spent
            time.sleep(0.01)
    return {"token": token, "pid": os.getpid(), "previous_runs": before}


register_ingest_task("hold_first", hold_first)
