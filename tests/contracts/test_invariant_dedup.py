"""Deduplication: one live job per key, race-free under concurrent enqueuers, atomic with the
caller's transaction, and optionally blocking a repeat for a window after the job finished."""

from __future__ import annotations

import threading

import psycopg
import pytest

import queue_workflows
from queue_workflows import InvalidPayloadError, claim_worker, node_queue, register_ingest_task


def test_a_second_enqueue_with_a_live_key_returns_the_first_job(database_url, conn):
    register_ingest_task("t", lambda reason: {})
    first = node_queue.enqueue_ingest_job("t", "fetch", {"n": 1}, dedup_key="report:2026-11-22")
    again = node_queue.enqueue_ingest_job("t", "fetch", {"n": 2}, dedup_key="report:2026-11-22")
    other = node_queue.enqueue_ingest_job("t", "fetch", dedup_key="report:2026-11-23")
    plain = [node_queue.enqueue_ingest_job("t", "fetch")["id"] for _ in range(2)]
    assert again["id"] == first["id"] and again["args"] == {"n": 1}
    assert len({first["id"], other["id"], *plain}) == 4, "other keys and no key are independent"
    assert conn.execute("SELECT count(*) AS n FROM ingest_jobs").fetchone()["n"] == 4


def test_eight_concurrent_enqueuers_create_one_job(database_url, conn):
    register_ingest_task("t", lambda reason: {})
    barrier = threading.Barrier(8)
    ids: list[int] = []
    errors: list[BaseException] = []

    def enqueue() -> None:
        try:
            with psycopg.connect(database_url) as own, own.transaction():
                barrier.wait(timeout=10)
                ids.append(node_queue.enqueue_ingest_job("t", "fetch", dedup_key="hot", conn=own)["id"])
        except BaseException as exc:  # noqa: BLE001
            errors.append(exc)

    for _round in range(5):
        conn.execute("DELETE FROM ingest_jobs")
        ids.clear()
        threads = [threading.Thread(target=enqueue) for _ in range(8)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(timeout=30)
        assert not errors, errors
        assert len(ids) == 8 and len(set(ids)) == 1, ids
        assert conn.execute("SELECT count(*) AS n FROM ingest_jobs WHERE dedup_key = 'hot'").fetchone()["n"] == 1


def test_dedup_is_atomic_with_the_callers_transaction(database_url, conn):
    register_ingest_task("t", lambda reason: {})
    with psycopg.connect(database_url) as own:
        with own.transaction():
            node_queue.enqueue_ingest_job("t", "fetch", dedup_key="k", conn=own)
            raise psycopg.Rollback()  # the caller changes its mind
    assert conn.execute("SELECT count(*) AS n FROM ingest_jobs").fetchone()["n"] == 0, "rolled back with the caller"
    fresh = node_queue.enqueue_ingest_job("t", "fetch", dedup_key="k")
    assert fresh["dedup_key"] == "k"


def test_a_finished_job_frees_its_key_unless_a_window_holds_it(database_url, conn):
    register_ingest_task("t", lambda reason: {})
    first = node_queue.enqueue_ingest_job("t", "fetch", dedup_key="daily")
    assert claim_worker.ClaimWorker("fetch", max_jobs=1).run_forever() == 0
    second = node_queue.enqueue_ingest_job("t", "fetch", dedup_key="daily")
    assert second["id"] != first["id"], "no window: a finished job no longer holds the key"
    assert claim_worker.ClaimWorker("fetch", max_jobs=1).run_forever() == 0

    queue_workflows.configure(database_url=database_url, ingest_queues=frozenset({"fetch"}), dedup_window_seconds=3600)
    register_ingest_task("t", lambda reason: {})
    third = node_queue.enqueue_ingest_job("t", "fetch", dedup_key="daily")
    assert third["id"] == second["id"] and third["status"] == "completed", "finished within the window"


@pytest.mark.parametrize("key", ["", "x" * 201, "a\x00b", 42])
def test_a_bad_key_is_refused_before_anything_is_written(database_url, conn, key):
    register_ingest_task("t", lambda reason: {})
    with pytest.raises(InvalidPayloadError, match="dedup_key"):
        node_queue.enqueue_ingest_job("t", "fetch", dedup_key=key)
    assert conn.execute("SELECT count(*) AS n FROM ingest_jobs").fetchone()["n"] == 0
