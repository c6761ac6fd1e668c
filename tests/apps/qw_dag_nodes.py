"""Node callables for the DAG tests: each records its execution so 'exactly once' can be counted."""

from __future__ import annotations

import os
import time
from typing import Any


def _record(node: str) -> None:
    url = os.environ.get("QW_DATABASE_URL")
    if not url:
        return
    import psycopg

    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute("INSERT INTO test_executions (token, worker_pid) VALUES (%s, %s)", (node, os.getpid()))


def source(n: int = 3, sleep: float = 0.0) -> dict[str, Any]:
    time.sleep(sleep)
    _record("source")
    return {"items": [{"i": i, "kind": "even" if i % 2 == 0 else "odd"} for i in range(n)], "pid": os.getpid()}


def work(item: Any = None, label: str = "work", sleep: float = 0.0) -> dict[str, Any]:
    time.sleep(sleep)
    _record(label)
    return {label: item, "pid": os.getpid()}


def join(**parts: Any) -> dict[str, Any]:
    _record("join")
    return {"joined": sorted(parts), "pid": os.getpid()}


def echo(**kwargs: Any) -> dict[str, Any]:
    return {"echo": kwargs}


def boom(message: str = "boom") -> dict[str, Any]:
    raise RuntimeError(message)


def run(value: Any = None) -> dict[str, Any]:
    return {"value": value}


def flaky(label: str = "flaky") -> dict[str, Any]:
    """Fails its first attempt (recorded as `<label>_try`), succeeds on the next."""
    url = os.environ["QW_DATABASE_URL"]
    import psycopg

    with psycopg.connect(url, autocommit=True) as conn:
        tries = conn.execute("SELECT count(*) FROM test_executions WHERE token = %s", (f"{label}_try",)).fetchone()[0]
        conn.execute("INSERT INTO test_executions (token, worker_pid) VALUES (%s, %s)", (f"{label}_try", os.getpid()))
    if tries == 0:
        raise RuntimeError("first attempt fails")
    _record(label)
    return {"tries": tries + 1}
