"""The operator's view and levers: overview, workers, jobs with their event history, cancel, retry."""

from __future__ import annotations

import pytest
import qw_test_app
from procs import Procs, query, service_env, wait_exit, wait_until, wait_workers_ready

from queue_workflows import InvalidNameError, InvalidPayloadError, claim_worker, node_queue, register_ingest_task
from queue_workflows.jobstore import Claimant
from queue_workflows.leader import reclaim
from queue_workflows.ops import admin


@pytest.fixture(autouse=True)
def _tasks(database_url: str) -> None:
    register_ingest_task("ok", lambda reason: {"ok": True})
    register_ingest_task("boom", lambda reason: (_ for _ in ()).throw(RuntimeError("boom")))
    register_ingest_task("record", qw_test_app.record)


def test_the_happy_path_leaves_no_events_and_every_other_transition_does(database_url, conn):
    happy = node_queue.enqueue_ingest_job("ok", "fetch")
    failing = node_queue.enqueue_ingest_job("boom", "fetch", max_attempts=2)
    assert claim_worker.ClaimWorker("fetch", max_jobs=2).run_forever() == 0
    assert admin.job_detail(f"ingest:{happy['id']}")["events"] == []
    conn.execute("UPDATE ingest_jobs SET run_after = now() WHERE id = %s", (failing["id"],))
    assert claim_worker.ClaimWorker("fetch", max_jobs=1).run_forever() == 0
    detail = admin.job_detail(f"ingest:{failing['id']}")
    assert [(e["from_status"], e["to_status"]) for e in detail["events"]] == [("running", "scheduled"), ("running", "failed")]
    assert "boom" in detail["events"][0]["error"] and detail["events"][0]["worker_id"]

    lost = node_queue.enqueue_ingest_job("ok", "fetch")
    node_queue.claim_ingest_job("fetch", Claimant("gone:fetch:1:x", 7300))  # no session holds 7300
    reclaim.reclaim_orphans(confirm_seconds=0.05)
    assert [(e["from_status"], e["to_status"], e["worker_id"]) for e in admin.job_detail(str(lost["id"]))["events"]] == [("running", "queued", "gone:fetch:1:x")]


def test_cancel_and_retry(database_url, conn):
    job = node_queue.enqueue_ingest_job("boom", "fetch", max_attempts=1)
    cancelled = admin.cancel_job(str(job["id"]), reason="not needed")
    assert cancelled["status"] == "cancelled" and "not needed" in cancelled["error"]
    with pytest.raises(admin.JobNotFoundError, match="only scheduled, queued or running"):
        admin.cancel_job(str(job["id"]))
    assert claim_worker.ClaimWorker("fetch", max_jobs=1).drain() == 0, "a cancelled job is never claimed"
    again = admin.retry_job(f"ingest:{job['id']}")
    assert (again["status"], again["attempts"]) == ("queued", 0)
    with pytest.raises(admin.JobNotFoundError, match="only failed or cancelled"):
        admin.retry_job(str(job["id"]))
    events = [(e["from_status"], e["to_status"]) for e in admin.job_detail(str(job["id"]))["events"]]
    assert events == [("queued", "cancelled"), ("cancelled", "queued")]


def test_references_and_filters_are_validated(database_url):
    ingest = node_queue.enqueue_ingest_job("ok", "fetch")
    node = node_queue.enqueue_node_job("n", "cpu", node_module="qw_test_nodes")
    assert ingest["id"] == node["id"] == 1
    with pytest.raises(InvalidNameError, match="ingest:1 and node:1"):
        admin.job_detail("1")
    assert admin.job_detail("node:1")["job"]["node_name"] == "n"
    for bad in ("x", "ingest:", "node:-1", "1; DROP TABLE ingest_jobs", "gpu:1"):
        with pytest.raises(InvalidNameError):
            admin.job_detail(bad)
    with pytest.raises(admin.JobNotFoundError):
        admin.job_detail("ingest:999")
    with pytest.raises(InvalidPayloadError, match="status must be one of"):
        admin.list_jobs(status="done")
    assert {(j["family"], j["id"]) for j in admin.list_jobs(status="queued")} == {("ingest", 1), ("node", 1)}
    assert [j["family"] for j in admin.list_jobs(queue="cpu")] == ["node"]


def test_overview_reports_depth_and_the_oldest_queued_job(database_url, conn):
    node_queue.enqueue_ingest_job("ok", "fetch")
    conn.execute("UPDATE ingest_jobs SET created_at = now() - interval '90 seconds'")
    node_queue.enqueue_ingest_job("ok", "fetch")
    fetch = next(r for r in admin.queue_overview() if r["queue"] == "fetch")
    assert fetch["queued"] == 2 and 89 <= fetch["oldest_queued_s"] < 120
    assert {(r["family"], r["queue"]) for r in admin.queue_overview()} >= {("node", "cpu"), ("node", "gpu"), ("ingest", "alpha")}


@pytest.mark.multiprocess
def test_cancelling_a_running_job_stops_its_worker_and_leaves_the_row_cancelled(database_url: str, procs: Procs) -> None:
    worker = procs.worker(service_env(database_url), "fetch")
    wait_workers_ready(database_url, [worker])
    job = node_queue.enqueue_ingest_job("record", "fetch", {"token": "cancel-me", "sleep": 30})
    wait_until(lambda: query(database_url, "SELECT status FROM ingest_jobs WHERE id = %s", (job["id"],))[0]["status"] == "running", timeout=10)
    [listed] = [w for w in admin.worker_list() if w["pid"] == worker.pid]
    assert listed["connected"] and listed["last_flagged_dead_at"] is None
    admin.cancel_job(f"ingest:{job['id']}")
    assert wait_exit(worker, 10, procs) == 77, procs.logs()
    row = query(database_url, "SELECT status, result FROM ingest_jobs WHERE id = %s", (job["id"],))[0]
    assert row == {"status": "cancelled", "result": None}
