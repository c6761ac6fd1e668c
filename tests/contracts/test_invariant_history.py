"""Moving finished jobs to history loses none and shows none twice: real workers drain while the real
leader moves what they finish, and a reader of `ingest_jobs_all` sees every job exactly once throughout.
"""

from __future__ import annotations

import threading

import psycopg
import pytest
from procs import Procs, query, service_env, wait_until, wait_workers_ready

from queue_workflows import node_queue, register_ingest_task

pytestmark = pytest.mark.multiprocess

WAVES, PER_WAVE = 6, 100


def test_a_job_is_in_exactly_one_place_while_workers_finish_and_the_leader_moves(database_url: str, procs: Procs) -> None:
    register_ingest_task("noop", lambda reason: {})
    env = service_env(database_url, QW_HISTORY_AFTER_SECONDS="0.2", QW_RETENTION_INTERVAL_SECONDS="0.2")
    procs.orchestrator(env)
    workers = [procs.worker(env, "fetch") for _ in range(2)]
    wait_workers_ready(database_url, workers)
    enqueued = [0]
    seen: list[tuple[int, int, int]] = []  # (jobs enqueued before the read, rows read, distinct ids read)
    stop = threading.Event()

    def read() -> None:
        with psycopg.connect(database_url, autocommit=True) as conn:
            while not stop.is_set():
                before = enqueued[0]
                rows, distinct = conn.execute("SELECT count(*), count(DISTINCT id) FROM ingest_jobs_all").fetchone()  # type: ignore[misc]
                seen.append((before, rows, distinct))

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    for _ in range(WAVES):
        for _ in range(PER_WAVE):
            node_queue.enqueue_ingest_job("noop", "fetch")
        enqueued[0] += PER_WAVE
        wait_until(lambda: query(database_url, "SELECT count(*) AS n FROM ingest_jobs_history")[0]["n"] >= enqueued[0] - PER_WAVE,
                   timeout=30, what="the previous wave moved")
    wait_until(lambda: query(database_url, "SELECT count(*) AS n FROM ingest_jobs_history")[0]["n"] == WAVES * PER_WAVE,
               timeout=60, what="every job moved")
    stop.set()
    reader.join(timeout=10)
    assert len(seen) > 20
    assert [s for s in seen if s[1] != s[2] or s[1] < s[0]] == []  # never twice, never missing
    assert query(database_url, "SELECT count(*) AS n FROM ingest_jobs")[0]["n"] == 0
    assert query(database_url, "SELECT status, attempts, count(*) AS n FROM ingest_jobs_history GROUP BY 1, 2") == [
        {"status": "completed", "attempts": 1, "n": WAVES * PER_WAVE}]
