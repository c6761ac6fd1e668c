"""A worker whose previous backend outlives its client (half-open connection) must not wedge."""

from __future__ import annotations

import threading

from queue_workflows import claim_worker, db, node_queue, reclaim, register_ingest_task
from queue_workflows.jobstore import WORKER_LOCK_NAMESPACE

from procs import wait_until


def _steal_key_after_killing_session(admin, worker_session) -> int:
    """Kill the session's backend and take its key, as a lingering old backend would hold it."""
    key = worker_session.lock_key
    pid = worker_session.conn.info.backend_pid
    admin.execute("SELECT pg_terminate_backend(%s)", (pid,))
    wait_until(lambda: not admin.execute("SELECT 1 FROM pg_stat_activity WHERE pid = %s", (pid,)).fetchone(), timeout=5)
    admin.execute("SELECT pg_advisory_lock(%s, %s)", (WORKER_LOCK_NAMESPACE, key))
    return key


def _holder(conn, key: int) -> int | None:
    row = conn.execute(
        "SELECT pid FROM pg_locks WHERE locktype = 'advisory' AND classid::bigint = %s AND objid::bigint = %s AND objsubid = 2 AND granted",
        (WORKER_LOCK_NAMESPACE, key),
    ).fetchone()
    return row["pid"] if row else None


def test_reconnect_takes_a_fresh_key_and_moves_the_running_job_onto_it(database_url, conn):
    release = threading.Event()
    register_ingest_task("hold", lambda reason: {"released": release.wait(20)})
    job = node_queue.enqueue_ingest_job("hold", "fetch")
    worker = claim_worker.ClaimWorker("fetch", max_jobs=1)
    thread = threading.Thread(target=worker.run_forever, daemon=True)
    thread.start()
    with db.connect(autocommit=True, url=database_url) as admin:
        try:
            wait_until(lambda: conn.execute("SELECT status FROM ingest_jobs WHERE id = %s", (job["id"],)).fetchone()["status"] == "running", timeout=10)
            old_key = _steal_key_after_killing_session(admin, worker.session)

            worker.session.run(lambda c: c.execute("SELECT 1"))  # notices the loss and reconnects

            new_key = worker.session.lock_key
            assert new_key != old_key
            assert _holder(conn, new_key) == worker.session.conn.info.backend_pid
            row = conn.execute("SELECT claim_lock_key FROM ingest_jobs WHERE id = %s", (job["id"],)).fetchone()
            assert row["claim_lock_key"] == new_key
            admin.execute("SELECT pg_advisory_unlock(%s, %s)", (WORKER_LOCK_NAMESPACE, old_key))  # the old backend finally dies
            assert reclaim.reclaim_orphans() == [], "the job followed its worker to the new key"
        finally:
            release.set()
            thread.join(timeout=10)
    done = conn.execute("SELECT status, attempts, result FROM ingest_jobs WHERE id = %s", (job["id"],)).fetchone()
    assert (done["status"], done["attempts"], done["result"]) == ("completed", 1, {"released": True})
