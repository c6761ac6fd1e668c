"""A LIMITed claim takes at most its limit, whatever plan the planner picks and however many claim at once."""

from __future__ import annotations

import threading

import psycopg
from psycopg.rows import dict_row

from queue_workflows.common import sqlfile
from queue_workflows.worker.batch.worker import claim_batch_query

_JOBS = sqlfile.load("queue_workflows", "jobs.sql")
_DAG = sqlfile.load("queue_workflows.dag", "dag.sql")
# Plans the planner is free to pick: a nested loop that rescans the LIMITed pick per outer row.
RESCANNING_PLAN = ("enable_hashjoin", "enable_mergejoin", "enable_hashagg", "enable_material", "enable_sort")


def _backlog(conn: psycopg.Connection, n: int, status: str = "queued") -> None:
    conn.execute("INSERT INTO ingest_jobs (task_name, queue, status) SELECT 't', 'fetch', %s FROM generate_series(1, %s)",
                 (status, n))
    conn.execute("ANALYZE ingest_jobs")


def _claim(conn: psycopg.Connection, worker: str, limit: int) -> list[int]:
    params = {"queue": "fetch", "worker_id": worker, "lock_key": 1, "lease_seconds": 60, "limit": limit, "aging_seconds": 0}
    with conn.transaction():
        return [row["id"] for row in conn.execute(claim_batch_query("ingest_jobs", "highest_first"), params)]


def _rescanning(url: str) -> psycopg.Connection:
    conn = psycopg.connect(url, autocommit=True, row_factory=dict_row)
    for setting in RESCANNING_PLAN:
        conn.execute(f"SET {setting} = off")
    return conn


def test_a_batch_claim_takes_at_most_its_limit_under_a_rescanning_plan(database_url, conn):
    _backlog(conn, 300)
    with _rescanning(database_url) as claimer:
        claimed = _claim(claimer, "w1", 10)
    assert len(claimed) == 10, f"a batch of limit 10 claimed {len(claimed)} rows"
    assert conn.execute("SELECT count(*) AS n FROM ingest_jobs WHERE status = 'running'").fetchone()["n"] == 10


def test_promotion_takes_at_most_its_limit_under_a_rescanning_plan(database_url, conn):
    _backlog(conn, 300, status="scheduled")
    with _rescanning(database_url) as promoter:
        promoted = promoter.execute(_JOBS.sql("promote_due_jobs", "ingest_jobs"), {"queue": "fetch", "limit": 10}).fetchall()
    assert len(promoted) == 10, f"a promotion of limit 10 promoted {len(promoted)} rows"


def test_an_input_listener_takes_at_most_its_limit_of_submissions_under_a_rescanning_plan(database_url, conn):
    run_id = conn.execute("INSERT INTO workflow_runs (workflow_name, status) VALUES ('w', 'running') RETURNING id").fetchone()["id"]
    conn.execute("INSERT INTO workflow_input_submissions (run_id, node_name, value) "
                 "SELECT %s, 'ask', '{}'::jsonb FROM generate_series(1, 300)", (run_id,))
    conn.execute("ANALYZE workflow_input_submissions")
    with _rescanning(database_url) as listener:
        taken = listener.execute(_DAG["dag_claim_submissions"], {"listener": "l1", "limit": 10}).fetchall()
    assert len(taken) == 10, f"a listener of limit 10 took {len(taken)} submissions"


def test_concurrent_batch_claims_each_stay_within_the_limit_and_never_share_a_job(database_url, conn):
    total, limit, workers = 2000, 25, 8
    _backlog(conn, total)
    batches: list[list[int]] = []
    errors: list[BaseException] = []

    def drain(worker: str) -> None:
        try:
            with psycopg.connect(database_url, autocommit=True, row_factory=dict_row) as own:
                while batch := _claim(own, worker, limit):
                    batches.append(batch)
        except BaseException as exc:  # noqa: BLE001 - reported by the assertion below
            errors.append(exc)

    threads = [threading.Thread(target=drain, args=(f"w{i}",)) for i in range(workers)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)
    assert not errors and not any(t.is_alive() for t in threads), errors
    assert max(len(b) for b in batches) <= limit
    claimed = [job_id for batch in batches for job_id in batch]
    assert len(claimed) == len(set(claimed)) == total, "every job claimed exactly once"
