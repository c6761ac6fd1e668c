"""Postgres restarts under a running cluster: workers and orchestrator ride it out and every job completes.

Uses a private pgserver instance so the shared session server is never restarted.
"""

from __future__ import annotations

import time
from collections import Counter
from pathlib import Path

import psycopg
import pytest
from procs import PrivatePostgres, Procs, log_text, query, query_or_none, service_env, wait_for_log, wait_until, wait_workers_ready

from queue_workflows import db, node_queue

pytestmark = pytest.mark.multiprocess

TESTS_DIR = Path(__file__).resolve().parent


def _status_counts(url: str) -> Counter:
    rows = query_or_none(url, "SELECT status, count(*) AS n FROM ingest_jobs GROUP BY status")
    return Counter({r["status"]: r["n"] for r in rows or []})


def _wait_all_settled(url: str, n_jobs: int, procs: Procs, *, timeout: float) -> Counter:
    """Wait until no job is queued, running or scheduled (a body that met the outage retries after
    its backoff); fail with the last counts and the logs."""
    last: Counter = Counter()

    def settled() -> Counter | None:
        nonlocal last
        last = _status_counts(url)
        return last if sum(last.values()) == n_jobs and not (last["queued"] or last["running"] or last["scheduled"]) else None

    try:
        return wait_until(settled, timeout=timeout, interval=0.1, what="every job finished")
    except AssertionError as exc:
        raise AssertionError(f"{exc}; last counts {dict(last)}\n{procs.logs()}") from None


def _start_cluster(url: str, procs: Procs, n_workers: int, **settings: str) -> list:
    env = service_env(url, **settings)
    orchestrator = procs.orchestrator(env)
    workers = [procs.worker(env, "fetch") for _ in range(n_workers)]
    wait_workers_ready(url, workers)
    wait_for_log(orchestrator, "orchestrator running", timeout=30)
    return [orchestrator, *workers]


def test_cluster_rides_out_a_postgres_restart(private_pg: PrivatePostgres, private_database_url: str, procs: Procs) -> None:
    url = private_database_url
    n_jobs = 40
    # A lease that outlasts the outage under load (pg_ctl stop + start takes 1-2.5 s here): a worker
    # whose lease lapses mid-outage must stop (exit 77), which is not what this test is about.
    orchestrator, *workers = _start_cluster(url, procs, 2, QW_LEASE_SECONDS="6", QW_LEASE_RENEW_SECONDS="1")

    tokens = [f"restart-{i}" for i in range(n_jobs)]
    with db.connect(url=url) as conn, conn.transaction():
        for token in tokens:
            node_queue.enqueue_ingest_job("record", "fetch", {"token": token, "sleep": 0.1}, conn=conn)

    # Stop Postgres while both workers sleep inside a job body (their database work for it is
    # done), so every in-flight job has a result to deliver across the outage. A body cut off
    # mid-query is the separate case below.
    def both_mid_sleep() -> Counter | None:
        counts = _status_counts(url)
        if counts["completed"] < 6:
            return None
        rows = query(
            url,
            "SELECT count(*) AS n FROM ingest_jobs j WHERE j.status = 'running' "
            "AND EXISTS (SELECT 1 FROM test_executions e WHERE e.token = j.args->>'token')",
        )
        return counts if rows[0]["n"] == 2 else None

    before = wait_until(both_mid_sleep, timeout=20, interval=0.005, what=f"both workers mid-job\n{procs.logs()}")
    private_pg.stop()
    down_at = time.monotonic()
    assert before["completed"] < n_jobs, f"everything finished before the restart; nothing was tested: {before}"
    time.sleep(2.0)  # the outage itself: the one fixed wait this test is about
    private_pg.start()
    up_at = time.monotonic()
    print(f"before restart: {dict(before)}; down for {up_at - down_at:.2f}s")

    final = _wait_all_settled(url, n_jobs, procs, timeout=45)
    print(f"all {n_jobs} settled {time.monotonic() - up_at:.2f}s after Postgres came back: {dict(final)}")
    assert final == Counter(completed=n_jobs), f"{dict(final)}\n{procs.logs()}"

    exited = [p for p in [orchestrator, *workers] if p.poll() is not None]
    assert not exited, f"process(es) exited across the restart: {[p.pid for p in exited]}\n{procs.logs()}"
    # Same PIDs, reconnected, session lock retaken (so a later crash is still detected at once).
    beats = wait_workers_ready(url, workers, timeout=15)
    held = query(
        url,
        "SELECT objid::int AS lock_key FROM pg_locks l JOIN pg_database d ON d.oid = l.database AND d.datname = current_database() "
        "WHERE locktype = 'advisory' AND granted AND classid = 20823 AND objsubid = 2",
    )
    assert {b["lock_key"] for b in beats.values()} <= {h["lock_key"] for h in held}, (beats, held, procs.logs())
    for w in workers:
        assert "database session restored" in log_text(w), procs.logs()

    runs = Counter(r["token"] for r in query(url, "SELECT token FROM test_executions"))
    assert set(runs) == set(tokens), f"never ran: {sorted(set(tokens) - set(runs))}"
    rerun = {t: n for t, n in runs.items() if n > 1}
    print(f"tokens run more than once (in flight during the outage): {rerun}")
    assert len(rerun) <= 2, f"more re-runs than jobs that were in flight: {rerun}\n{procs.logs()}"


def test_job_body_cut_off_mid_query_by_a_restart_is_retried_not_failed(
    private_pg: PrivatePostgres, private_database_url: str, procs: Procs
) -> None:
    url = private_database_url
    # A 60 s lease and the post-restart grace keep reclaim out of it: the outcome is the worker's.
    _start_cluster(url, procs, 1, QW_LEASE_SECONDS="60", QW_LEASE_RENEW_SECONDS="20")

    blocker = psycopg.connect(url)
    try:
        blocker.execute("LOCK TABLE test_executions IN ACCESS EXCLUSIVE MODE")  # holds the body's first query
        with db.connect(url=url) as conn, conn.transaction():  # not the pool: it would outlive this server
            job_id = node_queue.enqueue_ingest_job("record", "fetch", {"token": "cut"}, conn=conn)["id"]
        wait_until(
            lambda: query(
                url,
                "SELECT 1 FROM pg_locks l JOIN pg_database d ON d.oid = l.database AND d.datname = current_database() "
                "WHERE relation = 'test_executions'::regclass AND NOT granted",
            ),
            timeout=15, what=f"the job body blocked on its query\n{procs.logs()}",
        )
        private_pg.stop()  # terminates the body's query mid-flight: the task raises AdminShutdown
    finally:
        blocker.close()
    private_pg.start()

    job = wait_until(
        lambda: (rows := query_or_none(url, "SELECT * FROM ingest_jobs WHERE id = %s AND status IN ('completed', 'failed')", (job_id,))) and rows[0],
        timeout=30, what=f"job {job_id} finished\n{procs.logs()}",
    )
    print(f"job cut off by the restart ended {job['status']!r} after {job['attempts']} of {job['max_attempts']} attempts: {[ln for ln in (job['error'] or '').splitlines() if ln.startswith('psycopg.')][-1:]}")
    assert job["status"] == "completed", (job["status"], job["attempts"], job["error"])
    assert job["attempts"] == 2
