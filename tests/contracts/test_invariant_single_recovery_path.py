"""Contract 4: leases, not trust. A running job whose worker is gone returns to `queued`
through `reclaim_orphans` and nothing else: at once when its session lock is gone,
when its lease lapses when the host is merely unreachable."""

from __future__ import annotations

import pathlib
import re

import pytest
from procs import wait_until

import queue_workflows
from queue_workflows import db, node_queue, register_ingest_task
from queue_workflows.jobstore import WORKER_LOCK_NAMESPACE, Claimant
from queue_workflows.leader import reclaim


@pytest.fixture(autouse=True)
def _task():
    register_ingest_task("t", lambda reason: {})


def hold_lock(url: str, key: int):
    conn = db.connect(autocommit=True, url=url)
    assert conn.execute("SELECT pg_try_advisory_lock(%s, %s) AS ok", (WORKER_LOCK_NAMESPACE, key)).fetchone()["ok"]
    return conn


def status(conn, job_id: int) -> str:
    return conn.execute("SELECT status FROM ingest_jobs WHERE id = %s", (job_id,)).fetchone()["status"]


def test_a_live_session_keeps_its_job_and_a_dropped_one_loses_it_at_once(database_url, conn):
    session = hold_lock(database_url, 7001)
    node_queue.enqueue_ingest_job("t", "fetch")
    job = node_queue.claim_ingest_job("fetch", Claimant("w", 7001))
    assert reclaim.reclaim_orphans() == []
    assert status(conn, job["id"]) == "running"
    session.close()  # the worker process died: Postgres drops its lock once the backend has ended
    reclaimed = wait_until(reclaim.reclaim_orphans, timeout=10, what="the dropped session's job reclaimed")
    assert [(r["id"], r["status"], r["lost_by"]) for r in reclaimed] == [(job["id"], "queued", "w")]
    after = conn.execute("SELECT * FROM ingest_jobs WHERE id = %s", (job["id"],)).fetchone()
    assert (after["claimed_by"], after["claim_lock_key"], after["lease_expires_at"]) == (None, None, None)


def test_a_vanished_host_with_an_open_session_is_caught_by_lease_expiry(database_url, conn):
    session = hold_lock(database_url, 7002)
    try:
        node_queue.enqueue_node_job("n", "cpu", node_module="qw_test_nodes")
        job = node_queue.claim_node_job("cpu", Claimant("w", 7002))
        assert reclaim.reclaim_orphans() == []
        conn.execute("UPDATE workflow_node_jobs SET lease_expires_at = now() - interval '1 second' WHERE id = %s", (job["id"],))
        assert [r["id"] for r in reclaim.reclaim_orphans()] == [job["id"]]
        assert conn.execute("SELECT status FROM workflow_node_jobs WHERE id = %s", (job["id"],)).fetchone()["status"] == "queued"
    finally:
        session.close()


def test_jobs_claimed_before_a_server_restart_get_the_grace_period(database_url, conn):
    queue_workflows.configure(database_url=database_url, ingest_queues=frozenset({"fetch"}), lease_seconds=3600)
    node_queue.enqueue_ingest_job("t", "fetch")
    job = node_queue.claim_ingest_job("fetch", Claimant("w", 7003))  # no session holds 7003
    conn.execute("UPDATE ingest_jobs SET started_at = pg_postmaster_start_time() - interval '1 second' WHERE id = %s", (job["id"],))
    assert reclaim.reclaim_orphans() == [], "a worker reconnecting after a restart must get time to retake its lock"
    conn.execute("UPDATE ingest_jobs SET started_at = now() WHERE id = %s", (job["id"],))
    assert [r["id"] for r in reclaim.reclaim_orphans()] == [job["id"]]


def test_reclaim_fails_a_job_whose_attempts_are_spent(database_url, conn):
    node_queue.enqueue_ingest_job("t", "fetch", max_attempts=2)
    for attempt in (1, 2):
        job = node_queue.claim_ingest_job("fetch", Claimant("w", 7004))
        assert job["attempts"] == attempt
        [got] = reclaim.reclaim_orphans()
        assert got["status"] == ("queued" if attempt == 1 else "failed")
    after = conn.execute("SELECT * FROM ingest_jobs WHERE id = %s", (job["id"],)).fetchone()
    assert after["status"] == "failed" and "abandoned after 2 attempts" in after["error"]
    assert node_queue.claim_ingest_job("fetch", Claimant("w", 7004)) is None


def test_claim_never_steals_an_orphaned_running_job(database_url, conn):
    node_queue.enqueue_ingest_job("t", "fetch")
    job = node_queue.claim_ingest_job("fetch", Claimant("dead", 7005))
    conn.execute("UPDATE ingest_jobs SET lease_expires_at = now() - interval '1 hour' WHERE id = %s", (job["id"],))
    assert node_queue.claim_ingest_job("fetch", Claimant("other", 7006)) is None
    reclaim.reclaim_orphans()
    assert node_queue.claim_ingest_job("fetch", Claimant("other", 7006))["id"] == job["id"]


def test_only_reclaim_and_the_owners_release_or_retry_put_a_running_job_back():
    engine = pathlib.Path(queue_workflows.__file__).parent  # every named query of the engine, whatever its concern
    text = "\n".join(f.read_text() for f in sorted(engine.rglob("*.sql")) if "migrations" not in f.parts)
    blocks = re.split(r"^-- name: ", text, flags=re.MULTILINE)[1:]
    set_clauses = {b.split()[0]: re.findall(r"\bSET\b(.*?)\bWHERE\b", b, flags=re.DOTALL) for b in blocks}
    requeuers = {name for name, clauses in set_clauses.items() if any(f"'{s}'" in c for c in clauses for s in ("queued", "scheduled"))}
    assert requeuers == {"reclaim_orphans", "release_job", "retry_job", "promote_due_jobs", "watchdog_trip", "operator_retry_job",
                         "dag_reset_nodes", "map_promote", "oom_requeue"}
    for name in ("release_job", "retry_job", "watchdog_trip", "oom_requeue"):
        block = next(b for b in blocks if b.startswith(name))
        assert "claimed_by = %(worker_id)s AND status = 'running'" in block, f"{name} must only hand back the caller's own job"
    for name in ("operator_retry_job", "dag_reset_nodes"):
        operator = next(b for b in blocks if b.startswith(name))
        assert "status IN ('failed', 'cancelled')" in operator, f"{name}: an operator retries only finished jobs, never a running one"
    promote = next(b for b in blocks if b.startswith("promote_due_jobs"))
    assert "WHERE status = 'scheduled'" in promote and "'running'" not in promote, "promotion never touches a running job"
    items = next(b for b in blocks if b.startswith("map_promote"))
    assert "status = 'waiting'" in items and "'running'" not in items, "a map queues only its held items, never a running one"
