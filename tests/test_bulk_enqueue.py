"""`enqueue_ingest_jobs`: many jobs in one statement, validated up front, all or nothing."""

from __future__ import annotations

import pytest

from queue_workflows import db, node_queue, register_ingest_task
from queue_workflows.errors import InvalidPayloadError, ReservedQueueError, UnknownTaskError


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
    with db.connect(url=database_url) as writer:
        with writer.transaction():
            node_queue.enqueue_ingest_jobs(({"task_name": "t", "queue": q} for q in ["fetch", "load"] * 100), conn=writer)
            assert list(conn.notifies(timeout=0.2)) == []
        assert sorted(n.payload for n in conn.notifies(timeout=0.3)) == ["fetch", "load"]
    assert conn.execute("SELECT count(*) AS n FROM ingest_jobs").fetchone()["n"] == 200
