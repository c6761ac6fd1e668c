"""`enqueue_ingest_jobs`: many jobs in one statement, validated up front, all or nothing."""

from __future__ import annotations

import psycopg
import pytest
from waiting import worker_waiting

from queue_workflows import bulk, db, node_queue, register_ingest_task
from queue_workflows.errors import InvalidPayloadError, QueueWorkflowsError, ReservedQueueError, UnknownTaskError


@pytest.fixture(autouse=True)
def _task():
    register_ingest_task("t", lambda reason, args: args)


def test_rows_come_back_in_order_with_their_own_settings(conn):
    rows = node_queue.enqueue_ingest_jobs(
        [
            {"task_name": "t", "queue": "fetch", "args": {"i": 0}},
            {"task_name": "t", "queue": "load", "args": {"i": 1}, "priority": 7, "reason": "cron", "max_attempts": 5},
            {"task_name": "t", "queue": "fetch"},
        ]
    )
    assert [(r["queue"], r["args"], r["priority"], r["reason"], r["max_attempts"]) for r in rows] == [
        ("fetch", {"i": 0}, 0, "manual", 3),
        ("load", {"i": 1}, 7, "cron", 5),
        ("fetch", {}, 0, "manual", 3),
    ]
    assert conn.execute("SELECT count(*) AS n FROM ingest_jobs WHERE status = 'queued'").fetchone()["n"] == 3


def test_an_empty_batch_writes_nothing(conn):
    assert node_queue.enqueue_ingest_jobs([]) == []


@pytest.mark.parametrize(
    ("bad", "error", "message"),
    [
        ({"task_name": "t", "queue": "gpu"}, ReservedQueueError, "job #2: queue 'gpu' is reserved"),
        ({"task_name": "nope", "queue": "fetch"}, UnknownTaskError, "job #2: .*'nope' is not registered"),
        ({"task_name": "t", "queue": "fetch", "args": {"x": object()}}, InvalidPayloadError, "job #2: args is not JSON"),
        ({"task_name": "t", "queue": "fetch", "colour": "red"}, InvalidPayloadError, "job #2: .*colour"),
    ],
)
def test_one_bad_job_rejects_the_whole_batch(conn, bad, error, message):
    good = {"task_name": "t", "queue": "fetch"}
    with pytest.raises(error, match=message):
        node_queue.enqueue_ingest_jobs([good, good, bad, good])
    assert conn.execute("SELECT count(*) AS n FROM ingest_jobs").fetchone()["n"] == 0


def test_a_batch_rides_the_callers_transaction_with_one_notify_per_queue(database_url, conn):
    conn.execute("LISTEN ingest_job_ready")
    with worker_waiting(database_url, "fetch", "load"), db.connect(url=database_url) as writer:
        with writer.transaction():
            node_queue.enqueue_ingest_jobs(({"task_name": "t", "queue": q} for q in ["fetch", "load"] * 100), conn=writer)
            assert list(conn.notifies(timeout=0.2)) == []
        assert sorted(n.payload for n in conn.notifies(timeout=0.3)) == ["fetch", "load"]
    assert conn.execute("SELECT count(*) AS n FROM ingest_jobs").fetchone()["n"] == 200


# copy_ingest_jobs: the same validation, one COPY -------------------------------------------

TRICKY = {"path": "C:\\temp\\new", "tab": "a\tb", "line": "1\n2", "quote": "\"'", "uni": "žluťoučký 🐎", "nested": [{"x": None}]}


def test_copy_writes_the_same_rows_as_the_insert_path(conn):
    items = [
        {"task_name": "t", "queue": "fetch", "args": TRICKY, "reason": "tab\there\nand a \\ backslash"},
        {"task_name": "t", "queue": "load", "args": {"i": 1}, "priority": -7, "max_attempts": 5},
        {"task_name": "t", "queue": "fetch"},
    ]
    assert bulk.copy_ingest_jobs(items) == 3
    copied = conn.execute("SELECT queue, args, reason, priority, max_attempts, status FROM ingest_jobs ORDER BY id").fetchall()
    conn.execute("TRUNCATE ingest_jobs")
    inserted = [{k: r[k] for k in ("queue", "args", "reason", "priority", "max_attempts", "status")}
                for r in node_queue.enqueue_ingest_jobs(items)]
    assert copied == inserted
    assert copied[0]["args"] == TRICKY and copied[0]["reason"] == "tab\there\nand a \\ backslash"


@pytest.mark.parametrize(
    ("bad", "message"),
    [
        ({"task_name": "t", "queue": "fetch", "reason": None}, "job #2: reason must be a string"),  # the others omit it
        ({"task_name": "t", "queue": "fetch", "args": {"k": "nul\x00"}}, r"job #2: .*contains a NUL"),
        ({"task_name": "t", "queue": "fetch", "args": ["not", "a", "dict"]}, "job #2: args must be a JSON object"),
        ({"task_name": "t", "queue": "gpu"}, "job #2: queue 'gpu' is reserved"),
        ({"task_name": "t", "queue": "fetch", "priority": True}, "job #2: priority must be a 32-bit integer"),
        ({"task_name": "t", "queue": "fetch", "colour": "red"}, "job #2: unknown argument"),
        ("not a mapping", "job #2 must be a mapping"),
    ],
)
def test_copy_refuses_a_bad_item_by_its_index_and_writes_nothing(conn, bad, message):
    good = {"task_name": "t", "queue": "fetch", "args": {"i": 0}}
    with pytest.raises(QueueWorkflowsError, match=message):
        bulk.copy_ingest_jobs([good, dict(good, priority=0), bad, good])
    assert conn.execute("SELECT count(*) AS n FROM ingest_jobs").fetchone()["n"] == 0


def test_copy_joins_the_callers_transaction_and_wakes_workers_once_at_commit(database_url):
    with worker_waiting(database_url, "fetch", "load"), psycopg.connect(database_url, autocommit=True) as listener:
        listener.execute("LISTEN ingest_job_ready")
        with db.connect(url=database_url) as conn:
            assert bulk.copy_ingest_jobs([{"task_name": "t", "queue": "fetch"}] * 500, conn=conn) == 500
            conn.rollback()
        assert not list(listener.notifies(timeout=0.2))
        with db.connect(url=database_url) as conn:
            bulk.copy_ingest_jobs([{"task_name": "t", "queue": q} for q in ("fetch", "load") * 300], conn=conn)
            conn.commit()
        notes = list(listener.notifies(timeout=1, stop_after=2))
        assert sorted(n.payload for n in notes) == ["fetch", "load"]
        assert not list(listener.notifies(timeout=0.2))
    with db.connect(url=database_url) as check:
        assert check.execute("SELECT count(*) AS n FROM ingest_jobs").fetchone()["n"] == 600
