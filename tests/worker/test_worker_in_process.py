"""The claim worker driven in-process: execution outcomes, lease renewal, heartbeats."""

from __future__ import annotations

import threading
import time

import pytest
from procs import wait_until

import queue_workflows
from queue_workflows import claim_worker, node_queue, register_ingest_task
from queue_workflows.leader import reclaim


def run_worker(queue: str, **kwargs) -> tuple[claim_worker.ClaimWorker, threading.Thread]:
    worker = claim_worker.ClaimWorker(queue, **kwargs)
    thread = threading.Thread(target=worker.run_forever, daemon=True)
    thread.start()
    return worker, thread


def stop(worker: claim_worker.ClaimWorker, thread: threading.Thread) -> None:
    worker.request_stop()
    thread.join(timeout=10)
    assert not thread.is_alive()


def test_outcomes_are_stored_for_both_task_shapes_and_failures(conn):
    register_ingest_task("one_arg", lambda reason: {"reason": reason})
    register_ingest_task("two_args", lambda reason, args: {"doubled": args["n"] * 2})
    register_ingest_task("raises", lambda reason: 1 / 0)
    register_ingest_task("not_a_dict", lambda reason: [1, 2])
    ids = [
        node_queue.enqueue_ingest_job("one_arg", "fetch", reason="cron")["id"],
        node_queue.enqueue_ingest_job("two_args", "fetch", {"n": 21})["id"],
        node_queue.enqueue_ingest_job("raises", "fetch", max_attempts=1)["id"],
        node_queue.enqueue_ingest_job("not_a_dict", "fetch", max_attempts=1)["id"],
    ]
    worker = claim_worker.ClaimWorker("fetch", max_jobs=4)
    assert worker.run_forever() == 0
    rows = {r["id"]: r for r in conn.execute("SELECT * FROM ingest_jobs WHERE id = ANY(%s)", (ids,))}
    assert rows[ids[0]]["result"] == {"reason": "cron"}
    assert rows[ids[1]]["result"] == {"doubled": 42}
    assert rows[ids[2]]["status"] == "failed" and "ZeroDivisionError" in rows[ids[2]]["error"]
    assert rows[ids[3]]["status"] == "failed" and "must return a dict" in rows[ids[3]]["error"]


def test_node_jobs_run_their_module_and_store_the_context_delta(conn):
    job = node_queue.enqueue_node_job("square", "cpu", node_module="qw_demo.square", inputs={"x": 9})
    missing = node_queue.enqueue_node_job("ghost", "cpu", node_module="qw_demo.no_such_module_anywhere", max_attempts=1, check_callable=False)
    assert claim_worker.ClaimWorker("cpu", max_jobs=2).run_forever() == 0
    rows = {r["id"]: r for r in conn.execute("SELECT * FROM workflow_node_jobs")}
    assert rows[job["id"]]["context_delta"] == {"square": 81}
    assert rows[missing["id"]]["status"] == "failed" and "no_such_module_anywhere" in rows[missing["id"]]["error"]


def test_a_live_worker_keeps_renewing_a_job_longer_than_its_lease(database_url, conn):
    queue_workflows.configure(
        database_url=database_url, ingest_queues=frozenset({"fetch"}), lease_seconds=1.0, lease_renew_seconds=0.25
    )
    release = threading.Event()
    register_ingest_task("slow", lambda reason: {"waited": release.wait(10)})
    job = node_queue.enqueue_ingest_job("slow", "fetch")
    worker, thread = run_worker("fetch", max_jobs=1)
    try:
        wait_until(lambda: conn.execute("SELECT status FROM ingest_jobs WHERE id = %s", (job["id"],)).fetchone()["status"] == "running", timeout=10)
        deadline = time.monotonic() + 3.0  # three whole leases
        while time.monotonic() < deadline:
            assert reclaim.reclaim_orphans() == [], "a renewing worker's job was reclaimed"
            time.sleep(0.1)
        release.set()
        thread.join(timeout=10)
    finally:
        release.set()
        stop(worker, thread)
    row = conn.execute("SELECT status, attempts, result FROM ingest_jobs WHERE id = %s", (job["id"],)).fetchone()
    assert (row["status"], row["attempts"], row["result"]) == ("completed", 1, {"waited": True})


def test_heartbeat_makes_the_worker_visible_and_a_clean_stop_removes_it(database_url, conn):
    worker, thread = run_worker("load")
    try:
        live = wait_until(lambda: node_queue.ingest_snapshot()["queues"]["load"]["workers"], timeout=10, what="heartbeat")
        assert live == 1
        hb = conn.execute("SELECT * FROM worker_heartbeats").fetchone()
        assert (hb["worker_id"], hb["queue"], hb["state"]) == (worker.worker_id, "load", "idle")
    finally:
        stop(worker, thread)
    assert conn.execute("SELECT count(*) AS n FROM worker_heartbeats").fetchone()["n"] == 0
    assert node_queue.ingest_snapshot()["queues"]["load"]["workers"] == 0


def test_a_worker_for_an_unknown_queue_refuses_to_start(database_url):
    with pytest.raises(queue_workflows.UnknownQueueError):
        claim_worker.ClaimWorker("nope")


def test_a_failed_attempt_is_retried_after_a_backoff_until_attempts_are_spent(database_url, conn):
    queue_workflows.configure(database_url=database_url, ingest_queues=frozenset({"fetch"}), retry_base_seconds=0.3, poll_seconds=0.1)
    calls: list[float] = []

    def flaky(reason: str) -> dict:
        calls.append(time.monotonic())
        raise RuntimeError(f"attempt {len(calls)} broke")

    register_ingest_task("flaky", flaky)
    job = node_queue.enqueue_ingest_job("flaky", "fetch", max_attempts=3)
    worker = claim_worker.ClaimWorker("fetch", max_jobs=3)
    worker.run_forever()
    row = conn.execute("SELECT * FROM ingest_jobs WHERE id = %s", (job["id"],)).fetchone()
    assert (row["status"], row["attempts"]) == ("failed", 3)
    assert "attempt 3 broke" in row["error"]
    gaps = [b - a for a, b in zip(calls, calls[1:])]
    assert len(calls) == 3 and gaps[0] >= 0.3 * 0.8 and gaps[1] >= 0.6 * 0.8, gaps  # 0.3 s then 0.6 s, +/-20 %


def test_a_retry_waiting_for_its_delay_is_not_claimable(database_url, conn):
    register_ingest_task("t", lambda reason: {})
    job = node_queue.enqueue_ingest_job("t", "fetch", max_attempts=2)
    claimant = node_queue.Claimant("w", 1)
    node_queue.claim_ingest_job("fetch", claimant)
    from queue_workflows import jobstore

    retried = jobstore.fetch_one(None, jobstore.retry_statement("ingest_jobs", job["id"], "w", error="boom", delay_seconds=60))
    assert (retried["status"], retried["error"], retried["claimed_by"]) == ("scheduled", "boom", None)
    assert node_queue.claim_ingest_job("fetch", claimant) is None
    assert jobstore.promote_due(conn, "ingest_jobs", "fetch") == 0, "not due for another minute"
    conn.execute("UPDATE ingest_jobs SET run_after = now() WHERE id = %s", (job["id"],))
    assert jobstore.promote_due(conn, "ingest_jobs", "load") == 0, "promotion is per queue"
    assert jobstore.promote_due(conn, "ingest_jobs", "fetch") == 1
    again = node_queue.claim_ingest_job("fetch", claimant)
    assert again["attempts"] == 2
    spent = jobstore.retry_statement("ingest_jobs", job["id"], "w", error="x", delay_seconds=0)
    assert jobstore.fetch_one(None, spent) is None, "attempts are spent"
