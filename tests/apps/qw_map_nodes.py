"""Node callables for the map tests: each item records its execution so 'exactly once' can be counted."""

from __future__ import annotations

import os
import time
from typing import Any


def _record(token: str) -> int:
    """Record one execution of `token`; returns how many were recorded before it."""
    url = os.environ.get("QW_DATABASE_URL")
    if not url:
        return 0
    import psycopg

    with psycopg.connect(url, autocommit=True) as conn:
        before = conn.execute("SELECT count(*) FROM test_executions WHERE token = %s", (token,)).fetchone()[0]
        conn.execute("INSERT INTO test_executions (token, worker_pid) VALUES (%s, %s)", (token, os.getpid()))
    return int(before)


def ids(n: int = 3, sleep: float = 0.0) -> dict[str, Any]:
    time.sleep(sleep)
    return {"ids": list(range(n)), "not_a_list": {"a": 1}}


def square(item: int, offset: int = 0, sleep: float = 0.0, record: bool = False) -> dict[str, Any]:
    if record:
        _record(f"item:{item}")
    time.sleep(sleep)
    return {"sq": item * item + offset, "pid": os.getpid()}


def flaky_item(item: int) -> dict[str, Any]:
    """Fails each item's first attempt, succeeds on the next."""
    if _record(f"try:{item}") == 0:
        raise RuntimeError(f"item {item}: first attempt fails")
    return {"item": item}


def fail_on(item: int, bad: int) -> dict[str, Any]:
    if item == bad:
        raise ValueError(f"item {item} is bad")
    return {"item": item}


def total(items: list[Any]) -> dict[str, Any]:
    return {"sum": sum(i["sq"] for i in items if i is not None), "n": len(items)}
