"""Through a transaction-mode PgBouncer: producers, the dashboard's reads and `qw` work; workers, orchestrators and schedulers refuse to start."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
import qw_test_app
from procs import TEST_INGEST_QUEUES, Procs, query, service_env, wait_exit, wait_for_log, wait_until

import queue_workflows
from queue_workflows import bulk, db, node_queue, pooler, tasks
from queue_workflows.dag import Workflow
from queue_workflows.ops import overview, status
from queue_workflows.worker import exits

pytestmark = pytest.mark.multiprocess

REFUSAL = "points at a transaction-mode pooler"


def test_the_look_tells_transaction_pooling_from_a_session(database_url, pgbouncer):
    assert pooler.shared_backend(database_url) is None
    assert pooler.shared_backend(pgbouncer("session").url) is None
    moved = pooler.shared_backend(pgbouncer("transaction").url)
    assert moved is not None, "two transactions of one client through a transaction pooler kept one backend, or no other client shared it"


def test_producers_enqueue_and_read_through_a_transaction_pooler(database_url, pgbouncer):
    bouncer = pgbouncer("transaction")
    db.close_pools()
    queue_workflows.configure(database_url=bouncer.url, ingest_queues=TEST_INGEST_QUEUES)
    tasks.register_ingest_task("record", qw_test_app.record)
    workflow = Workflow("pooled").node("a", "qw_dag_nodes:echo").node("b", "qw_dag_nodes:echo", deps=["a"])
    for i in range(12):  # past psycopg's prepare threshold (5): a prepared statement would land on another backend
        node_queue.enqueue_ingest_job("record", "fetch", {"token": f"one-{i}"})
        node_queue.enqueue_ingest_jobs([{"task_name": "record", "queue": "fetch", "args": {"token": f"many-{i}"}}])
        bulk.copy_ingest_jobs([{"task_name": "record", "queue": "fetch", "args": {"token": f"copy-{i}"}}])
        assert status.status_data()["ingest"] is not None
        overview.worker_overview()
        overview.throughput()
        queue_workflows.start_run(workflow, {"i": i})
    rows = query(database_url, "SELECT count(*) AS n FROM ingest_jobs WHERE status = 'queued'")
    assert rows[0]["n"] == 36
    assert query(database_url, "SELECT count(*) AS n FROM workflow_runs")[0]["n"] == 12
    out = subprocess.run([sys.executable, "-m", "qw_services.cli", "jobs", "--json", "--limit", "100"], env=service_env(bouncer.url),
                         capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert sum(job["family"] == "ingest" for job in json.loads(out.stdout)) == 36, out.stdout[-2000:]


def test_session_roles_refuse_a_transaction_pooler_with_one_line(database_url, pgbouncer, procs: Procs):
    bouncer = pgbouncer("transaction")
    env = service_env(bouncer.url, QW_MIGRATE_ON_START="false")
    started = [procs.worker(env, "fetch"), procs.orchestrator(env), procs.scheduler(env)]
    for proc in started:
        code = wait_exit(proc, 60, procs)
        text = proc.log_path.read_text()  # type: ignore[attr-defined]
        assert code == exits.EXIT_TRANSACTION_POOLER == 80, procs.logs()
        lines = [line for line in text.splitlines() if REFUSAL in line]
        assert len(lines) == 1 and lines[0].startswith("error: QW_DATABASE_URL points at"), text[-2000:]
        assert "connect workers, orchestrators and schedulers to Postgres directly or through a session-mode pool" in lines[0]
    assert query(database_url, "SELECT count(*) AS n FROM worker_heartbeats")[0]["n"] == 0
    # The worker's refusal is recorded for the cluster metrics (qw_cluster_worker_exits_total{code="80"}).
    assert [(r["queue"], r["code"]) for r in query(database_url, "SELECT queue, code FROM qw_worker_exits")] == [("fetch", 80)]


def test_a_worker_and_an_orchestrator_run_through_a_session_pooler(database_url, pgbouncer, procs: Procs):
    bouncer = pgbouncer("session")
    tasks.register_ingest_task("record", qw_test_app.record)
    node_queue.enqueue_ingest_job("record", "fetch", {"token": "via-session-pool"})
    orchestrator = procs.orchestrator(service_env(bouncer.url, QW_MIGRATE_ON_START="false"))
    worker = procs.worker(service_env(bouncer.url), "fetch")
    wait_for_log(orchestrator, "orchestrator running: leading term", timeout=60)
    wait_until(lambda: query(database_url, "SELECT 1 FROM ingest_jobs WHERE status = 'completed'") or worker.poll() is not None,
               timeout=60, what="the job to complete through the session pool")
    assert worker.poll() is None and orchestrator.poll() is None, procs.logs()
    assert query(database_url, "SELECT count(*) AS n FROM test_executions WHERE token = 'via-session-pool'")[0]["n"] == 1
