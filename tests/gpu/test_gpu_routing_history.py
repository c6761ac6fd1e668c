"""The GPU claim plan times a second copy from a model's recent jobs after they moved to history."""

from __future__ import annotations

import psycopg
from procs import TEST_INGEST_QUEUES

import queue_workflows
from queue_workflows import jobstore, node_queue
from queue_workflows.jobstore import WORKER_LOCK_NAMESPACE
from queue_workflows.leader import history


def test_a_second_copy_is_timed_from_moved_jobs(database_url, conn):
    queue_workflows.configure(database_url=database_url, ingest_queues=TEST_INGEST_QUEUES, history_after_seconds=60)
    for i in range(6):  # one 10 s load, then 0.1 s jobs, all finished an hour ago
        conn.execute("INSERT INTO workflow_node_jobs (node_name, queue, required_model, status, finished_at, model_hit, model_load_seconds, "
                     "wall_seconds) VALUES (%s, 'gpu', 'A', 'completed', now() - interval '1 hour' + make_interval(secs => %s), %s, %s, %s)",
                     (f"done-{i}", i, i > 0, 0.0 if i else 10.0, 0.1 if i else 10.1))
    assert history.move_once(conn)[0]["move_standalone_node_jobs"] == 6
    with psycopg.connect(database_url, autocommit=True) as holder:  # another live worker holds A
        holder.execute("SELECT pg_advisory_lock_shared(%s, 951)", (WORKER_LOCK_NAMESPACE,))
        conn.execute("INSERT INTO worker_heartbeats (worker_id, host_label, queue, pid, lock_key, loaded_models) "
                     "VALUES ('w-a', 'w-a', 'gpu', 1, 951, ARRAY['A'])")
        for i in range(50):  # 5 s of work: less than the 10 s a second copy's load costs
            node_queue.enqueue_node_job(f"A-{i}", "gpu", node_module="qw_test_nodes", required_model="A")
        statement = node_queue.claim_statement("workflow_node_jobs", "gpu", jobstore.Claimant("w-me", 901), current_model=None,
                                               loaded_models=(), vram_available_gb=None)
        assert jobstore.fetch_one(None, statement) is None
