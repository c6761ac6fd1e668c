"""Helpers for testing applications built on queue_workflows against a real Postgres.

    url = testing.create_database(server_url, "myapp_test")
    queue_workflows.configure(database_url=url); db.bootstrap()
    node_queue.enqueue_ingest_job("send_mail", "fetch", {"to": "a@b"})
    assert testing.run_until_empty("fetch") == 1
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable, Mapping
from typing import Any, TypeVar

import psycopg
from psycopg import conninfo, sql

from queue_workflows.dag.execute import load_context
from queue_workflows.jobrow import NodeJob
from queue_workflows.worker.claim import ClaimWorker
from queue_workflows.worker.executor import Outcome, run_node_job

T = TypeVar("T")


def wait_until(predicate: Callable[[], T], *, timeout: float, interval: float = 0.05, what: str = "condition") -> T:
    """Poll `predicate` until it returns something truthy; TimeoutError after `timeout` seconds."""
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            raise TimeoutError(f"timed out after {timeout:.1f}s waiting for {what} (last value: {value!r})")
        time.sleep(interval)


def create_database(server_url: str, prefix: str = "qw_test") -> str:
    """Create an empty database named `<prefix>_<random>` on the server; returns its DSN."""
    name = f"{prefix}_{uuid.uuid4().hex[:10]}"
    with psycopg.connect(server_url, autocommit=True) as conn:
        conn.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))
    return conninfo.make_conninfo(server_url, dbname=name)


def drop_database(server_url: str, url: str) -> None:
    """Drop the database `url` names, disconnecting anyone still in it."""
    name = str(conninfo.conninfo_to_dict(url)["dbname"])
    with psycopg.connect(server_url, autocommit=True) as conn:
        conn.execute(sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(name)))


def run_until_empty(queue: str) -> int:
    """Run ready jobs on `queue` in this process, one at a time, until none is left; returns how many ran."""
    worker = ClaimWorker(queue)
    try:
        return worker.drain()
    finally:
        worker.session.close()


def run_node_row(row: Mapping[str, Any]) -> Outcome:
    """Run a `workflow_node_jobs` row's code in process as a worker would (its run read first), storing nothing."""
    job = NodeJob.from_row(row)
    return run_node_job(job, load_context(job))
