"""Contract 3: terminal transitions are idempotent; JSON is validated before any write."""

from __future__ import annotations

import pytest

from queue_workflows import node_queue, register_ingest_task
from queue_workflows.errors import InvalidPayloadError
from queue_workflows.jobstore import Claimant


@pytest.fixture(autouse=True)
def _task():
    register_ingest_task("t", lambda reason: {})


def row(conn, table: str, job_id: int) -> dict:
    return conn.execute(f"SELECT * FROM {table} WHERE id = %s", (job_id,)).fetchone()


def test_second_completion_returns_none_and_keeps_the_first_result(conn):
    job = node_queue.enqueue_node_job("n", "cpu", node_module="qw_test_nodes")
    first = node_queue.mark_completed(job["id"], {"answer": 1})
    assert first["status"] == "completed" and first["context_delta"] == {"answer": 1}
    assert node_queue.mark_completed(job["id"], {"answer": 2}) is None
    assert node_queue.mark_failed(job["id"], "late failure") is None
    after = row(conn, "workflow_node_jobs", job["id"])
    assert (after["status"], after["context_delta"], after["error"]) == ("completed", {"answer": 1}, None)


def test_failure_is_final_too(conn):
    job = node_queue.enqueue_ingest_job("t", "fetch")
    assert node_queue.mark_ingest_failed(job["id"], "boom")["status"] == "failed"
    assert node_queue.mark_ingest_completed(job["id"], {"ok": True}) is None
    assert node_queue.mark_ingest_failed(job["id"], "again") is None
    after = row(conn, "ingest_jobs", job["id"])
    assert (after["status"], after["error"], after["result"]) == ("failed", "boom", None)


def test_cancelled_rows_are_terminal(conn):
    job = node_queue.enqueue_ingest_job("t", "fetch")
    conn.execute("UPDATE ingest_jobs SET status = 'cancelled' WHERE id = %s", (job["id"],))
    assert node_queue.mark_ingest_completed(job["id"], {}) is None
    assert row(conn, "ingest_jobs", job["id"])["status"] == "cancelled"


@pytest.mark.parametrize(
    "bad",
    [{"x": float("nan")}, {"x": object()}, ["not", "an", "object"], {"x": "\u0000"}, {"blob": "x" * 2_000_000}],
    ids=["nan", "object", "list", "nul", "oversize"],
)
def test_bad_result_json_fails_before_the_write(conn, bad):
    job = node_queue.enqueue_node_job("n", "cpu", node_module="qw_test_nodes")
    with pytest.raises(InvalidPayloadError):
        node_queue.mark_completed(job["id"], bad)
    assert row(conn, "workflow_node_jobs", job["id"])["status"] == "queued"


def test_a_worker_guarded_mark_is_refused_once_the_job_is_no_longer_its_own(conn):
    node_queue.enqueue_ingest_job("t", "fetch")
    job = node_queue.claim_ingest_job("fetch", Claimant("w-old", 1))
    conn.execute("UPDATE ingest_jobs SET status = 'queued' WHERE id = %s", (job["id"],))  # reclaimed
    assert node_queue.mark_ingest_completed(job["id"], {"late": True}, worker_id="w-old") is None
    again = node_queue.claim_ingest_job("fetch", Claimant("w-new", 2))
    assert node_queue.mark_ingest_completed(job["id"], {"late": True}, worker_id="w-old") is None
    assert node_queue.mark_ingest_completed(again["id"], {"fresh": True}, worker_id="w-new")["result"] == {"fresh": True}
