"""Enqueues through the process's pool reach a Postgres that comes back within a second of it, as workers do (docs/ha.md)."""

from __future__ import annotations

import threading
import time

import psycopg
import pytest
from procs import PrivatePostgres, query

from queue_workflows import db, node_queue, register_ingest_task
from queue_workflows.db_pool import RECONNECT_EVERY_SECONDS
from queue_workflows.errors import QueueWorkflowsError

pytestmark = pytest.mark.timeout(90)

OUTAGE_SECONDS = 3.2  # past psycopg_pool's third attempt (1 s, then 2 s later): its fourth would come ~4 s later


def test_a_producer_follows_a_restarted_server_within_a_second(private_pg: PrivatePostgres, private_database_url: str) -> None:
    register_ingest_task("t", lambda reason: {})
    node_queue.enqueue_ingest_job("t", "fetch")  # the pool is open, with a connection the stop will break
    private_pg.stop()
    refused: list[str] = []
    acknowledged: list[tuple[int, float]] = []

    def produce() -> None:
        while not acknowledged:
            try:
                job = node_queue.enqueue_ingest_job("t", "fetch", dedup_key="after-restart")
                acknowledged.append((int(job["id"]), time.monotonic()))
            except (psycopg.Error, QueueWorkflowsError) as exc:  # not acknowledged: a producer retries
                refused.append(type(exc).__name__)
                time.sleep(0.05)

    producer = threading.Thread(target=produce, daemon=True)
    producer.start()
    time.sleep(OUTAGE_SECONDS)  # the outage itself: how long the server stays down is what is tested
    private_pg.start()
    back_at = time.monotonic()
    producer.join(timeout=40)
    assert acknowledged, f"no enqueue acknowledged within 40 s of the restart; refused: {refused}"
    [(job, at)] = acknowledged
    lag = at - back_at
    assert lag < 2 * RECONNECT_EVERY_SECONDS + 0.2, f"the first enqueue was acknowledged {lag:.2f}s after Postgres was back"
    assert refused, "the stale pooled connection should have refused the first enqueue after the stop"
    assert query(private_database_url, "SELECT status FROM ingest_jobs WHERE id = %s", (job,)) == [{"status": "queued"}]
    assert db.pool().get_stats().get("connections_errors", 0) >= 3, db.pool().get_stats()
