"""The one-job worker's per-job path: one row version per completion, and a beat that keeps its own clock while jobs fly by."""

from __future__ import annotations

import time

from procs import wait_until

from queue_workflows import claim_worker, node_queue, register_ingest_task

JOBS = 80
ROW_UPDATES = "SELECT n_tup_upd AS n FROM pg_stat_user_tables WHERE relname = 'ingest_jobs'"
OUR_BACKENDS = "SELECT count(*) AS n FROM pg_stat_activity WHERE datname = current_database() AND pid <> pg_backend_pid()"


def _enqueue(conn, n: int) -> list[int]:
    register_ingest_task("quick", lambda reason: {"ok": True})
    rows = node_queue.enqueue_ingest_jobs(({"task_name": "quick", "queue": "fetch", "reason": "t"} for _ in range(n)), conn=conn)
    return [r["id"] for r in rows]


def _row_updates(conn) -> int:
    conn.execute("SELECT pg_stat_clear_snapshot()")
    return int(conn.execute(ROW_UPDATES).fetchone()["n"])


def test_a_completed_job_costs_its_row_two_versions_with_its_usage_in_the_second(conn):
    ids = _enqueue(conn, JOBS)
    before = _row_updates(conn)
    worker = claim_worker.ClaimWorker("fetch", max_jobs=JOBS)
    assert worker.run_forever() == 0
    # A backend's counts reach pg_stat_user_tables by the time it leaves pg_stat_activity.
    wait_until(lambda: conn.execute(OUR_BACKENDS).fetchone()["n"] == 0, timeout=10, what="the worker's backends to end")
    updates = _row_updates(conn) - before
    rows = conn.execute("SELECT status, result, cpu_seconds, peak_rss_bytes, wall_seconds FROM ingest_jobs WHERE id = ANY(%s)", (ids,)).fetchall()
    assert [r["status"] for r in rows] == ["completed"] * JOBS
    assert all(r["result"] == {"ok": True} and r["cpu_seconds"] is not None and r["peak_rss_bytes"] > 0 and r["wall_seconds"] is not None
               for r in rows), rows[:3]
    # The claim, then the completion with the job's accounting in it; a lease renewal may add one.
    assert updates <= 2 * JOBS + 2, f"{updates} row updates for {JOBS} jobs: {updates / JOBS:.2f} per job"


def test_a_busy_workers_beat_wakes_on_its_own_clock_not_once_per_job(conn):
    _enqueue(conn, JOBS)
    worker = claim_worker.ClaimWorker("fetch", max_jobs=JOBS)
    started = time.monotonic()
    assert worker.run_forever() == 0
    elapsed = time.monotonic() - started
    sleeps = worker.beat.pacer.sleeps
    # Every check interval while jobs run, plus a few wake-ups (a poke, a NOTIFY): its clock, whatever the jobs' pace.
    allowed = 2 * elapsed / worker.beat.check_seconds + 10
    print(f"\n{JOBS} jobs in {elapsed:.2f}s: the beat slept {sleeps} times (allowed {allowed:.0f})")
    assert sleeps <= allowed, f"the beat woke {sleeps} times for {JOBS} jobs in {elapsed:.2f}s"
