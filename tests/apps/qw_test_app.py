"""Tasks the multi-process tests run in real worker processes (imported via QW_APP)."""

from __future__ import annotations

import os
import signal
import time
from typing import Any

import psycopg

from queue_workflows import config, register_ingest_task

TEST_QUEUES = "fetch,load,alpha,beta"


def _record(token: str) -> int:
    """Log one execution of `token`; returns how many times it had run before."""
    with psycopg.connect(config.current().database_url(), autocommit=True) as conn:
        before = conn.execute("SELECT count(*) FROM test_executions WHERE token = %s", (token,)).fetchone()[0]
        conn.execute("INSERT INTO test_executions (token, worker_pid) VALUES (%s, %s)", (token, os.getpid()))
    return int(before)


def noop(reason: str) -> dict[str, Any]:
    return {}


def record(reason: str, args: dict[str, Any]) -> dict[str, Any]:
    """Record the run, then sleep `sleep` seconds (first run only when `first_run_sleep` is set).

    On its first run only, it also waits (up to a minute) for the file `first_run_wait_file` to exist.
    """
    token = str(args["token"])
    before = _record(token)
    delay = float(args.get("first_run_sleep", 0)) if before == 0 else 0.0
    delay += float(args.get("sleep", 0))
    if delay:
        time.sleep(delay)
    if before == 0 and args.get("first_run_wait_file"):
        deadline = time.monotonic() + 60
        while not os.path.exists(args["first_run_wait_file"]) and time.monotonic() < deadline:
            time.sleep(0.02)
    return {"token": token, "pid": os.getpid(), "previous_runs": before}


def kill_self(reason: str, args: dict[str, Any]) -> dict[str, Any]:
    """Record the run, then SIGKILL this worker process, as the kernel's OOM killer would."""
    _record(str(args["token"]))
    os.kill(os.getpid(), signal.SIGKILL)
    time.sleep(60)
    raise AssertionError("still alive after SIGKILL")


def fail(reason: str, args: dict[str, Any]) -> dict[str, Any]:
    raise RuntimeError(f"asked to fail: {args.get('why', 'no reason')}")


register_ingest_task("noop", noop)
register_ingest_task("record", record)
register_ingest_task("fail", fail)
register_ingest_task("kill_self", kill_self)


def beat_then_hang(reason: str, args: dict[str, Any]) -> dict[str, Any]:
    """Record the run, report progress `beats` times, then go quiet for `hang` seconds."""
    from queue_workflows import report_progress

    _record(str(args["token"]))
    for _ in range(int(args.get("beats", 1))):
        report_progress()
        time.sleep(float(args.get("beat_every", 0.05)))
    time.sleep(float(args.get("hang", 0)))
    return {"pid": os.getpid()}


register_ingest_task("beat_then_hang", beat_then_hang)


class CustomBaseError(BaseException):
    """Not an Exception: the kind of thing a task should never raise, and a worker must survive."""


def _raise(exc: BaseException) -> None:
    raise exc


POISON: dict[str, Any] = {
    "nul_error": lambda: _raise(ValueError("bad \x00 name")),
    "surrogate_error": lambda: _raise(OSError("file " + b"\xff".decode("utf-8", "surrogateescape"))),
    "nul_result": lambda: {"x": "a\x00b"},
    "surrogate_result": lambda: {"x": "\udc80"},
    "system_exit_0": lambda: _raise(SystemExit(0)),
    "system_exit_3": lambda: _raise(SystemExit(3)),
    "keyboard_interrupt": lambda: _raise(KeyboardInterrupt()),
    "generator_exit": lambda: _raise(GeneratorExit()),
    "custom_base": lambda: _raise(CustomBaseError("custom")),
}


def poison(reason: str, args: dict[str, Any]) -> dict[str, Any] | None:
    """Raise or return the bad thing named by `args["kind"]` (one of POISON)."""
    result: dict[str, Any] | None = POISON[args["kind"]]()
    return result


register_ingest_task("poison", poison)


# A memory probe the throttle tests steer through a JSON file: {"ram": .., "swap": .., "gpu": ..}.
if os.environ.get("QW_TEST_MEMORY_FILE"):
    import json

    from queue_workflows import MemoryReadings, set_memory_probe

    def _file_probe() -> MemoryReadings:
        with open(os.environ["QW_TEST_MEMORY_FILE"]) as f:
            data = json.load(f)
        return MemoryReadings(ram_percent=data["ram"], swap_percent=data["swap"], gpu_percent=data.get("gpu"))

    set_memory_probe(_file_probe)


def _alive(pid: int) -> bool:
    """A process that exists and is not a zombie (a killed worker the test has not reaped yet is dead)."""
    try:
        with open(f"/proc/{pid}/stat") as stat:
            return stat.read().rsplit(")", 1)[1].split()[0] != "Z"
    except (FileNotFoundError, IndexError):
        return False


def flow_span(reason: str, args: dict[str, Any]) -> dict[str, Any]:
    """Record this run's span under its key and how many live spans of that key it saw at its start
    and its end (others whose process is dead count as ended); sleep `sleep` between the two."""
    key, token = str(args.get("basin", "")), str(args["token"])
    with psycopg.connect(config.current().database_url(), autocommit=True) as conn:
        span = conn.execute("INSERT INTO test_flow_spans (key, token, pid) VALUES (%s, %s, %s) RETURNING id",
                            (key, token, os.getpid())).fetchone()[0]

        def live() -> int:
            rows = conn.execute("SELECT pid FROM test_flow_spans WHERE key = %s AND ended_at IS NULL", (key,)).fetchall()
            return sum(1 for (pid,) in rows if _alive(pid))

        seen = live()
        time.sleep(float(args.get("sleep", 0)))
        seen = max(seen, live())
        conn.execute("UPDATE test_flow_spans SET ended_at = clock_timestamp(), live_seen = %s WHERE id = %s", (seen, span))
    return {"pid": os.getpid(), "live_seen": seen}


register_ingest_task("flow_span", flow_span)
