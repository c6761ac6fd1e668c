"""Contract 1: enqueue is an INSERT whose NOTIFY rides the writer's transaction.

Since migration 0051 an enqueue notifies only while a worker of its queue waits (holds or queues
for the idle baton; gpu and baton-less queues always): these tests hold the batons of the
queues they enqueue on, as idle workers would. tests/worker/test_quiet_enqueue.py holds the rest.
"""

from __future__ import annotations

import psycopg
import pytest
from waiting import worker_waiting

from queue_workflows import db, node_queue, register_ingest_task
from queue_workflows.worker.claim import ready_channel


@pytest.fixture
def listener(database_url):
    with worker_waiting(database_url, "fetch", "load", "alpha"), db.connect(autocommit=True, url=database_url) as conn:
        conn.execute("LISTEN ingest_job_ready")
        conn.execute("LISTEN node_job_ready")
        yield conn


def drain(conn: psycopg.Connection, timeout: float = 0.3) -> list[tuple[str, str]]:
    return [(n.channel, n.payload) for n in conn.notifies(timeout=timeout)]


@pytest.fixture(autouse=True)
def _task():
    register_ingest_task("t", lambda reason: {})


def test_notify_is_delivered_only_when_the_callers_transaction_commits(database_url, listener):
    with db.connect(url=database_url) as writer:
        with writer.transaction():
            writer.execute("CREATE TEMP TABLE host_rows (v int)")
            writer.execute("INSERT INTO host_rows VALUES (1)")
            node_queue.enqueue_ingest_job("t", "fetch", {"a": 1}, conn=writer)
            assert drain(listener) == [], "NOTIFY escaped before commit"
        assert drain(listener) == [("ingest_job_ready", "fetch")]


def test_rollback_leaves_neither_row_nor_notify(database_url, listener, conn):
    with db.connect(url=database_url) as writer:
        with pytest.raises(RuntimeError):
            with writer.transaction():
                node_queue.enqueue_ingest_job("t", "load", conn=writer)
                raise RuntimeError("host write failed")
    assert drain(listener) == []
    assert conn.execute("SELECT count(*) AS n FROM ingest_jobs").fetchone()["n"] == 0


def test_node_job_insert_notifies_its_queue(listener):
    node_queue.enqueue_node_job("n", "gpu", node_module="qw_test_nodes", required_model="m")
    assert drain(listener) == [("node_job_ready", "gpu")]


def test_return_to_queued_notifies_but_other_updates_do_not(listener, conn):
    job = node_queue.enqueue_ingest_job("t", "alpha")
    drain(listener)
    conn.execute("UPDATE ingest_jobs SET priority = 5 WHERE id = %s", (job["id"],))
    assert drain(listener) == [], "an update that leaves the job queued must not wake workers"
    conn.execute("UPDATE ingest_jobs SET status = 'running' WHERE id = %s", (job["id"],))
    assert drain(listener) == []
    conn.execute("UPDATE ingest_jobs SET status = 'queued' WHERE id = %s", (job["id"],))
    assert drain(listener) == [("ingest_job_ready", "alpha")]


def test_bulk_enqueue_in_one_transaction_folds_to_one_notify_per_queue(database_url, listener):
    with db.connect(url=database_url) as writer, writer.transaction():
        for i in range(50):
            node_queue.enqueue_ingest_job("t", "fetch" if i % 2 else "load", {"i": i}, conn=writer)
    assert sorted(drain(listener)) == [("ingest_job_ready", "fetch"), ("ingest_job_ready", "load")]


def test_each_queue_has_a_channel_of_its_own_so_other_queues_workers_sleep_on(database_url):
    with worker_waiting(database_url, "fetch", "load"), db.connect(autocommit=True, url=database_url) as fetch_worker, db.connect(autocommit=True, url=database_url) as load_worker:
        fetch_worker.execute(f"LISTEN {ready_channel('fetch')}")
        load_worker.execute(f"LISTEN {ready_channel('load')}")
        with db.connect(url=database_url) as writer, writer.transaction():
            node_queue.enqueue_ingest_job("t", "fetch", conn=writer)
            assert drain(fetch_worker, 0.1) == []  # still only at commit
        assert drain(fetch_worker) == [("qw_ready_fetch", "fetch")]
        assert drain(load_worker) == [], "an enqueue on fetch woke a load worker"
        node_queue.enqueue_node_job("n", "cpu", node_module="qw_test_nodes")
        assert drain(fetch_worker) == [] and drain(load_worker) == []
