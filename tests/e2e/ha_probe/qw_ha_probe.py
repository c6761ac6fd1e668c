"""The failover test's task: it records each execution's start and end, so the test can see two runs of one job overlap."""

from __future__ import annotations

import json
import os
import socket
import time
import uuid
from typing import Any

from queue_workflows import register_ingest_task


def _record(entry: dict[str, Any]) -> None:
    # One short O_APPEND write per line: lines of the two workers never interleave.
    line = (json.dumps(entry) + "\n").encode()
    fd = os.open(os.environ["QW_HA_PROBE_LOG"], os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o666)
    try:
        os.write(fd, line)
    finally:
        os.close(fd)


def probe(reason: str, args: dict[str, Any]) -> dict[str, Any]:
    run = uuid.uuid4().hex
    where = {"n": args["n"], "run": run, "host": socket.gethostname(), "pid": os.getpid()}
    started = time.time()
    _record({**where, "phase": "start", "t": started})
    # A tick every quarter second: a run whose worker stops mid-way still shows how long it ran.
    while (left := started + float(args.get("seconds", 0.5)) - time.time()) > 0:
        time.sleep(min(0.25, left))
        _record({**where, "phase": "tick", "t": time.time()})
    _record({**where, "phase": "end", "t": time.time()})
    return {"n": args["n"], "run": run}


register_ingest_task("ha.probe", probe)
