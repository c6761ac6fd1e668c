"""The orchestrator's sweep keeps the tables lean: delayed jobs never slow a claim, due ones are
promoted (and wake workers), dead workers' heartbeat rows go, and a lock missing for one look
is not yet a death."""

from __future__ import annotations

import threading
import time

import psycopg
from procs import wait_until
from psycopg import sql
from waiting import worker_waiting

from queue_workflows import node_queue, register_ingest_task
from queue_workflows.jobstore import WORKER_LOCK_NAMESPACE, Claimant
from queue_workflows.leader import reclaim


def _sweep(database_url: str) -> reclaim.ReclaimLoop:
    loop = reclaim.ReclaimLoop(stop_event=threading.Event())
    with psycopg.connect(database_url, autocommit=True, row_factory=psycopg.rows.dict_row) as conn:
        loop.sweep(conn)  # type: ignore[arg-type]
    return loop


def _plan_nodes(plan: dict) -> list[dict]:
    nodes, stack = [], [plan]
    while stack:
        node = stack.pop()
        nodes.append(node)
        stack.extend(node.get("Plans", []))
    return nodes


def test_a_claim_never_walks_past_delayed_jobs(database_url, conn):
    register_ingest_task("t", lambda reason: {})
    conn.execute(
        "INSERT INTO ingest_jobs (task_name, queue, attempts, run_after) "
        "SELECT 't', 'fetch', 1, now() + interval '1 hour' FROM generate_series(1, 20000)"
    )
    conn.execute("ANALYZE ingest_jobs")
    ready = node_queue.enqueue_ingest_job("t", "fetch")
    counts = {r["status"]: r["n"] for r in conn.execute("SELECT status, count(*) AS n FROM ingest_jobs GROUP BY status")}
    assert counts == {"scheduled": 20000, "queued": 1}, "a future run_after lands as 'scheduled'"

    statement, params = node_queue.claim_statement("ingest_jobs", "fetch", Claimant("w", 1))
    explain = sql.SQL("EXPLAIN (ANALYZE, BUFFERS, FORMAT JSON) ") + statement
    for _ in range(2):  # the second look: the first also compiles the claim's plpgsql helpers, reading the catalogs
        with conn.transaction(force_rollback=True):  # EXPLAIN ANALYZE really claims: undo it
            [plan] = conn.execute(explain, params).fetchone()["QUERY PLAN"]
    nodes = _plan_nodes(plan["Plan"])
    # Job rows only: the band search's own CTE drops its terminating NULL row, which is no job read.
    removed = sum(n.get("Rows Removed by Filter", 0) for n in nodes if n.get("Relation Name") == "ingest_jobs")
    buffers = plan["Plan"].get("Shared Hit Blocks", 0) + plan["Plan"].get("Shared Read Blocks", 0)
    assert removed == 0, f"the claim filtered {removed} rows it should never have read"
    assert buffers < 50, f"the claim touched {buffers} buffers"
    assert node_queue.claim_ingest_job("fetch", Claimant("w", 1))["id"] == ready["id"]


def test_the_sweep_promotes_due_jobs_and_wakes_their_workers(database_url, conn):
    register_ingest_task("t", lambda reason: {})
    job = node_queue.enqueue_ingest_job("t", "fetch")
    conn.execute("UPDATE ingest_jobs SET status = 'scheduled', run_after = now() + interval '1 hour' WHERE id = %s", (job["id"],))
    with worker_waiting(database_url, "fetch"), psycopg.connect(database_url, autocommit=True) as listener:
        listener.execute("LISTEN ingest_job_ready")
        _sweep(database_url)
        assert conn.execute("SELECT status FROM ingest_jobs WHERE id = %s", (job["id"],)).fetchone()["status"] == "scheduled"
        conn.execute("UPDATE ingest_jobs SET run_after = now() WHERE id = %s", (job["id"],))
        _sweep(database_url)
        assert conn.execute("SELECT status FROM ingest_jobs WHERE id = %s", (job["id"],)).fetchone()["status"] == "queued"
        assert [n.payload for n in listener.notifies(timeout=2, stop_after=1)] == ["fetch"]


def test_the_sweep_prunes_heartbeats_of_dead_workers_only(database_url, conn):
    rows = {"dead": (9001, "2 minutes"), "alive-but-quiet": (9002, "2 minutes"), "just-lost-its-lock": (9003, "1 second")}
    for worker_id, (key, age) in rows.items():
        conn.execute(
            "INSERT INTO worker_heartbeats (worker_id, host_label, queue, pid, lock_key, last_seen) "
            "VALUES (%s, 'h', 'fetch', 1, %s, now() - %s::interval)",
            (worker_id, key, age),
        )
    with psycopg.connect(database_url, autocommit=True) as holder:
        holder.execute("SELECT pg_advisory_lock_shared(%s, %s)", (WORKER_LOCK_NAMESPACE, 9002))
        _sweep(database_url)
        left = {r["worker_id"] for r in conn.execute("SELECT worker_id FROM worker_heartbeats")}
    assert left == {"alive-but-quiet", "just-lost-its-lock"}


def test_the_view_of_live_sessions_uses_the_engines_lock_namespace(database_url, conn):
    with psycopg.connect(database_url, autocommit=True) as holder:
        holder.execute("SELECT pg_advisory_lock_shared(%s, %s)", (WORKER_LOCK_NAMESPACE, 4242))
        holder.execute("SELECT pg_advisory_lock_shared(%s, %s)", (WORKER_LOCK_NAMESPACE + 1, 4343))
        keys = {r["lock_key"] for r in conn.execute("SELECT lock_key FROM qw_worker_sessions")}
    assert 4242 in keys and 4343 not in keys


def test_a_lock_missing_at_one_look_is_not_yet_a_death(database_url, conn):
    register_ingest_task("t", lambda reason: {})
    node_queue.enqueue_ingest_job("t", "fetch")
    job = node_queue.claim_ingest_job("fetch", Claimant("w", 7100))  # no session holds 7100 yet
    suspects = reclaim.find_suspects(conn)
    assert suspects["ingest_jobs"] == [job["id"]]
    with psycopg.connect(database_url, autocommit=True) as reconnected:  # the worker is back in time
        reconnected.execute("SELECT pg_advisory_lock_shared(%s, %s)", (WORKER_LOCK_NAMESPACE, 7100))
        assert reclaim.reclaim_confirmed(conn, suspects) == []
    # Its backend ends a moment after the client closes: the lock goes with it, not at once.
    wait_until(lambda: reclaim.find_suspects(conn)["ingest_jobs"] == [job["id"]], timeout=5, what="the closed session's lock to go")
    started = time.monotonic()
    [row] = reclaim.reclaim_orphans(conn, confirm_seconds=0.2)
    assert row["id"] == job["id"] and time.monotonic() - started >= 0.2
