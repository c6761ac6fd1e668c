"""Contract 8 (the part this engine core owns): bad input gets a specific error and writes nothing."""

from __future__ import annotations

import pytest

import queue_workflows
from queue_workflows import node_queue, register_ingest_task
from queue_workflows.errors import (
    ConfigError,
    InvalidNameError,
    InvalidPayloadError,
    ReservedQueueError,
    UnknownQueueError,
    UnknownTaskError,
)

INJECTIONS = ["fetch'; DROP TABLE ingest_jobs; --", "fetch OR 1=1", "x\" ; SELECT pg_sleep(5) --", "Robert'); --"]


@pytest.fixture(autouse=True)
def _task():
    register_ingest_task("t", lambda reason, args: args)


def count_rows(conn) -> int:
    return conn.execute("SELECT (SELECT count(*) FROM ingest_jobs) + (SELECT count(*) FROM workflow_node_jobs) AS n").fetchone()["n"]


@pytest.mark.parametrize(
    ("kwargs", "error", "message"),
    [
        ({"task_name": "t", "queue": "nope"}, UnknownQueueError, "unknown ingest queue 'nope'"),
        ({"task_name": "t", "queue": "cpu"}, ReservedQueueError, "reserved"),
        ({"task_name": "t", "queue": "gpu"}, ReservedQueueError, "reserved"),
        ({"task_name": "missing", "queue": "fetch"}, UnknownTaskError, "'missing' is not registered"),
        ({"task_name": "t", "queue": "fetch", "args": {"when": object()}}, InvalidPayloadError, "not JSON-serialisable"),
        ({"task_name": "t", "queue": "fetch", "args": [1, 2]}, InvalidPayloadError, "must be a JSON object"),
        ({"task_name": "t", "queue": "fetch", "args": {"x": float("inf")}}, InvalidPayloadError, "not JSON-serialisable"),
        ({"task_name": "t", "queue": "fetch", "args": {"b": "x" * 1_100_000}}, InvalidPayloadError, "over the 1048576-byte limit"),
        ({"task_name": "t", "queue": "fetch", "priority": "high"}, InvalidPayloadError, "priority"),
        ({"task_name": "t", "queue": "fetch", "priority": 2**40}, InvalidPayloadError, "priority"),
        ({"task_name": "t", "queue": "fetch", "max_attempts": 0}, InvalidPayloadError, "max_attempts"),
        ({"task_name": "t", "queue": "fetch", "reason": ""}, InvalidPayloadError, "reason"),
    ],
)
def test_enqueue_ingest_rejects_bad_input_without_writing(conn, kwargs, error, message):
    with pytest.raises(error, match=message):
        node_queue.enqueue_ingest_job(**kwargs)
    assert count_rows(conn) == 0


@pytest.mark.parametrize("evil", INJECTIONS)
def test_injection_strings_as_names_are_rejected_as_names(conn, evil):
    with pytest.raises(InvalidNameError):
        node_queue.enqueue_ingest_job("t", evil)
    with pytest.raises(InvalidNameError):
        node_queue.enqueue_ingest_job(evil, "fetch")
    with pytest.raises(InvalidNameError):
        register_ingest_task(evil, lambda reason: {})
    with pytest.raises(UnknownQueueError):
        node_queue.enqueue_node_job("n", evil)
    with pytest.raises(InvalidNameError):
        node_queue.enqueue_node_job(evil, "cpu")
    with pytest.raises((InvalidNameError, UnknownQueueError)):
        node_queue.claim_ingest_job(evil, node_queue.Claimant("w", 1))
    with pytest.raises(ConfigError):
        queue_workflows.configure(ingest_queues=frozenset({evil}))
    assert count_rows(conn) == 0
    assert conn.execute("SELECT to_regclass('ingest_jobs') IS NOT NULL AS ok").fetchone()["ok"]


@pytest.mark.parametrize(
    ("kwargs", "error"),
    [
        ({"node_name": "n", "queue": "fetch"}, UnknownQueueError),
        ({"node_name": "", "queue": "cpu"}, InvalidNameError),
        ({"node_name": "n", "queue": "gpu", "required_model": "bad model!"}, InvalidNameError),
        ({"node_name": "n", "queue": "cpu", "inputs": {"s": {1, 2}}}, InvalidPayloadError),
        ({"node_name": "n", "queue": "cpu", "run_id": "7"}, InvalidPayloadError),
    ],
)
def test_enqueue_node_rejects_bad_input_without_writing(conn, kwargs, error):
    with pytest.raises(error):
        node_queue.enqueue_node_job(**kwargs)
    assert count_rows(conn) == 0


def test_configure_rejects_reserved_and_unknown_settings(database_url):
    with pytest.raises(ConfigError, match="QW_INGEST_QUEUES: 'gpu' is reserved"):
        queue_workflows.configure(ingest_queues=frozenset({"fetch", "gpu"}))
    with pytest.raises(ConfigError, match="unknown setting"):
        queue_workflows.configure(ingest_queue=frozenset({"fetch"}))
    with pytest.raises(ConfigError, match="QW_LEASE_SECONDS"):
        queue_workflows.configure(lease_seconds=-1)


def test_task_signatures_are_checked_at_registration():
    with pytest.raises(TypeError, match="takes .reason. or .reason, args."):
        register_ingest_task("three", lambda a, b, c: {})
    with pytest.raises(TypeError, match="not callable"):
        register_ingest_task("notfn", "run")  # type: ignore[arg-type]


def test_library_calls_on_a_missing_or_unmigrated_database_fail_at_once_and_clearly(scratch_database_url, pg_server_url):
    import time

    import queue_workflows
    from queue_workflows import ConfigError, SchemaNotReadyError, db, node_queue, register_ingest_task
    from queue_workflows.testing import create_database, drop_database

    queue_workflows.configure(database_url=scratch_database_url, ingest_queues=frozenset({"fetch"}))
    register_ingest_task("t", lambda reason: {})
    with pytest.raises(SchemaNotReadyError, match="schema is missing; run `qw migrate`"):
        node_queue.enqueue_ingest_job("t", "fetch")
    db.close_pools()

    missing = create_database(pg_server_url, "qw_gone")
    drop_database(pg_server_url, missing)
    queue_workflows.configure(database_url=missing, ingest_queues=frozenset({"fetch"}))
    register_ingest_task("t", lambda reason: {})
    started = time.monotonic()
    with pytest.raises(ConfigError, match="does not exist"):
        node_queue.enqueue_ingest_job("t", "fetch")
    assert time.monotonic() - started < 5, "no pool timeout"
