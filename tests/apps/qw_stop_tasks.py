"""Tasks for the hard-stop and watchdog tests (QW_APP=qw_stop_tasks): the usual test tasks, plus these."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
import time
from typing import Any

import psycopg
import qw_test_app  # noqa: F401 - registers the usual test tasks too

from queue_workflows import config, register_ingest_task

_local = threading.local()


def _conn() -> psycopg.Connection[Any]:
    """One connection per worker process: a `tick` costs one INSERT, so the worker spends its time committing."""
    conn = getattr(_local, "conn", None)
    if conn is None or conn.closed:
        conn = _local.conn = psycopg.connect(config.current().database_url(), autocommit=True)
    return conn


def tick(reason: str, args: dict[str, Any]) -> dict[str, Any]:
    """Record one execution of `token` and return at once."""
    _conn().execute("INSERT INTO test_executions (token, worker_pid) VALUES (%s, %s)", (str(args["token"]), os.getpid()))
    return {"token": args["token"]}


def spawn_then_hang(reason: str, args: dict[str, Any]) -> dict[str, Any]:
    """Start a process that writes `marker` after `child_delay` seconds, record its pid, then hang for `hang` seconds.

    With `orphan`, a shell starts it in the background and exits: the process is then no
    descendant of the worker any more, only a member of its process group.
    """
    script = "import sys, time; time.sleep(float(sys.argv[2])); open(sys.argv[1], 'w').write('done')"
    argv = [sys.executable, "-c", script, str(args["marker"]), str(args["child_delay"])]
    if args.get("orphan"):
        shell = subprocess.run(["sh", "-c", '"$@" >/dev/null 2>&1 & echo $!', "sh", *argv], capture_output=True, text=True, check=True)
        pid = int(shell.stdout.strip())
    else:
        pid = subprocess.Popen(argv).pid
    _conn().execute("INSERT INTO test_executions (token, worker_pid) VALUES (%s, %s)", (str(args["token"]), pid))
    time.sleep(float(args["hang"]))
    return {"child": pid}


register_ingest_task("tick", tick)
register_ingest_task("spawn_then_hang", spawn_then_hang)
