"""The history mover and retention's partition drops run as the orchestrator's role; a retry of a moved job as the dashboard's."""

from __future__ import annotations

from procs import TEST_INGEST_QUEUES, query

import queue_workflows
from queue_workflows import db, node_queue
from queue_workflows.leader import history, retention
from queue_workflows.ops import admin


def test_the_orchestrator_moves_and_drops_history_and_the_dashboard_retries_a_moved_job(login_as, database_url):
    queue_workflows.configure(database_url=database_url, ingest_queues=TEST_INGEST_QUEUES)
    queue_workflows.register_ingest_task("noop", lambda reason: {})
    old, failed = (node_queue.enqueue_ingest_job("noop", "fetch")["id"] for _ in range(2))
    query(database_url, "UPDATE ingest_jobs SET status = 'completed', finished_at = now() - interval '3 days' WHERE id = %s", (old,))
    query(database_url, "UPDATE ingest_jobs SET status = 'failed', finished_at = now() - interval '1 hour' WHERE id = %s", (failed,))
    queue_workflows.configure(database_url=login_as("qw_orchestrator"), ingest_queues=TEST_INGEST_QUEUES,
                              history_after_seconds=60, retain_finished_seconds=0)
    with db.connect(autocommit=True) as conn:
        assert history.move_once(conn)[0]["move_ingest_jobs"] == 2  # partitions made through the owner's function
    owners = {r["owner"] for r in query(database_url, "SELECT pg_get_userbyid(c.relowner) AS owner FROM pg_inherits i "
                                                      "JOIN pg_class c ON c.oid = i.inhrelid WHERE i.inhparent = 'ingest_jobs_history'::regclass")}
    assert owners == {query(database_url, "SELECT current_user AS u")[0]["u"]}  # the schema owner's, not the orchestrator's
    queue_workflows.configure(database_url=login_as("qw_orchestrator"), ingest_queues=TEST_INGEST_QUEUES, retain_finished_seconds=2 * 86400)
    with db.connect(autocommit=True) as conn:
        assert retention.prune_once(conn)["drop_history"] >= 1
    assert [r["id"] for r in query(database_url, "SELECT id FROM ingest_jobs_history")] == [failed]
    queue_workflows.configure(database_url=login_as("qw_dashboard"), ingest_queues=TEST_INGEST_QUEUES)
    assert admin.retry_job(f"ingest:{failed}")["status"] == "queued"
    assert query(database_url, "SELECT count(*) AS n FROM ingest_jobs_history")[0]["n"] == 0
