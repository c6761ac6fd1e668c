"""Retention: finished rows past their window go, oldest first and in batches; nothing live is touched.

And the node-event log (`node_events`) that retention keeps bounded, skips included.
"""

from __future__ import annotations

import threading

import pytest
from procs import TEST_INGEST_QUEUES, Procs, query, service_env, wait_until

import queue_workflows
from queue_workflows import ConfigError
from queue_workflows.dag import Workflow
from queue_workflows.dag.outbox import DispatchDrain
from queue_workflows.leader import retention

N = "qw_dag_nodes"
HOUR = 3600.0


def configure(url: str, **windows: float) -> None:
    queue_workflows.configure(database_url=url, ingest_queues=TEST_INGEST_QUEUES, **windows)


def ingest(url: str, status: str, age_hours: float) -> int:
    finished = "now() - make_interval(hours => %s)" if status in ("completed", "failed", "cancelled") else "NULL"
    return query(url, f"INSERT INTO ingest_jobs (task_name, queue, status, created_at, finished_at) "
                      f"VALUES ('t', 'fetch', %s, now() - make_interval(hours => %s), {finished}) RETURNING id",
                 (status, age_hours, age_hours) if finished != "NULL" else (status, age_hours))[0]["id"]


def ids(url: str, table: str) -> set[int]:
    return {r["id"] for r in query(url, f"SELECT id FROM {table}")}


def test_finished_jobs_past_the_window_go_and_everything_else_stays(database_url, conn):
    configure(database_url, retain_finished_seconds=2 * HOUR)
    old = [ingest(database_url, s, 3) for s in ("completed", "failed", "cancelled")]
    recent = ingest(database_url, "completed", 1)
    live = [ingest(database_url, s, 30) for s in ("queued", "running", "scheduled")]
    deleted = retention.prune_once(conn)
    assert deleted["prune_ingest_jobs"] == 3
    assert ids(database_url, "ingest_jobs") == {recent, *live}, old


def test_a_finished_run_goes_with_its_nodes_and_events_and_a_running_one_stays(database_url, conn):
    configure(database_url, retain_finished_seconds=HOUR, retain_events_seconds=0)
    done = queue_workflows.start_run(Workflow("w").node("a", f"{N}:echo"), {})
    query(database_url, "UPDATE workflow_node_jobs SET status = 'completed', finished_at = now() WHERE run_id = %s", (done,))
    DispatchDrain().drain_once(conn)
    running = queue_workflows.start_run(Workflow("w").node("a", f"{N}:echo"), {})
    assert queue_workflows.run_status(done)["status"] == "completed"
    query(database_url, "UPDATE workflow_runs SET finished_at = now() - interval '2 hours' WHERE id = %s", (done,))
    assert retention.prune_once(conn)["prune_runs"] == 1
    assert ids(database_url, "workflow_runs") == {running}
    assert {r["run_id"] for r in query(database_url, "SELECT run_id FROM workflow_node_jobs")} == {running}
    assert query(database_url, "SELECT count(*) AS n FROM workflow_dispatch_events WHERE run_id = %s", (done,))[0]["n"] == 0
    assert "prune_job_events" not in retention.prune_once(conn)  # 0 keeps the event log forever


def test_batches_are_capped_and_the_service_comes_straight_back_while_they_are_full(database_url, conn):
    configure(database_url, retain_finished_seconds=HOUR)
    old = {ingest(database_url, "completed", 2 + i) for i in range(7)}
    service = retention.Retention(stop_event=threading.Event(), batch=3, interval=60, pause=0.1)
    assert service._step(conn) == 0.1  # a full batch: more to do after a short pause
    left = ids(database_url, "ingest_jobs")
    assert len(left) == 4 and max(old) in old - left  # the oldest went first
    assert service._step(conn) == 0.1
    assert service._step(conn) == 60  # the last one was not full
    assert ids(database_url, "ingest_jobs") == set() and service.total == 7


def test_events_have_their_own_window(database_url, conn):
    configure(database_url, retain_finished_seconds=0, retain_events_seconds=HOUR)
    job = ingest(database_url, "queued", 0)
    query(database_url, "UPDATE ingest_jobs SET status = 'cancelled', finished_at = now() WHERE id = %s", (job,))
    query(database_url, "INSERT INTO job_events (job_table, job_id, to_status, attempts, at) "
                        "VALUES ('ingest_jobs', %s, 'failed', 1, now() - interval '2 hours')", (job,))
    for key, age in (("old", "2 hours"), ("new", "1 minute")):  # events of wait_event nodes, kept (no node waits)
        query(database_url, "INSERT INTO workflow_events (event_key, payload) VALUES (%s, '{}')", (key,))
        query(database_url, "UPDATE workflow_events SET created_at = now() - %s::interval WHERE event_key = %s", (age, key))
    for code, age in ((77, "2 hours"), (75, "1 minute")):  # recorded worker exits (migration 0055) share the window
        query(database_url, "INSERT INTO qw_worker_exits (worker_id, host_label, queue, code, at) "
                            "VALUES ('w', 'h', 'fetch', %s, now() - %s::interval)", (code, age))
    deleted = retention.prune_once(conn)
    assert deleted == {"prune_job_events": 1, "prune_dispatch_events": 0, "prune_workflow_events": 1, "prune_worker_exits": 1}
    assert [r["code"] for r in query(database_url, "SELECT code FROM qw_worker_exits")] == [75]
    assert [r["to_status"] for r in query(database_url, "SELECT to_status FROM job_events")] == ["cancelled"]
    assert [r["event_key"] for r in query(database_url, "SELECT event_key FROM workflow_events")] == ["new"]
    assert ids(database_url, "ingest_jobs") == {job}  # finished rows: kept forever


def test_a_window_shorter_than_the_dedup_window_is_refused(database_url):
    with pytest.raises(ConfigError, match="QW_RETAIN_FINISHED_SECONDS .* must cover QW_DEDUP_WINDOW_SECONDS"):
        configure(database_url, retain_finished_seconds=60, dedup_window_seconds=3600)


def test_node_events_log_skips_cancels_and_retries_by_run_and_node(database_url, conn):
    wf = (Workflow("log").node("a", f"{N}:echo")
          .node("maybe", f"{N}:echo", deps=["a"], skip_if={"$eq": [1, 1]}))
    run_id = queue_workflows.start_run(wf, {})
    query(database_url, "UPDATE workflow_node_jobs SET status = 'scheduled', attempts = 1, error = 'try again' "
                        "WHERE run_id = %s AND node_name = 'a'", (run_id,))
    query(database_url, "UPDATE workflow_node_jobs SET status = 'completed', finished_at = now() "
                        "WHERE run_id = %s AND node_name = 'a'", (run_id,))
    DispatchDrain().drain_once(conn)
    log = [(r["node_name"], r["from_status"], r["to_status"], r["error"])
           for r in query(database_url, "SELECT * FROM node_events WHERE run_id = %s ORDER BY id", (run_id,))]
    assert log == [("a", "queued", "scheduled", "try again"), ("a", "scheduled", "completed", None),
                   ("maybe", None, "skipped", None)]


@pytest.mark.multiprocess
def test_the_leading_orchestrator_prunes(database_url: str, procs: Procs) -> None:
    old = ingest(database_url, "completed", 48)
    kept = ingest(database_url, "completed", 1)
    # History off (0): its mover would take the kept job out of ingest_jobs too, racing the prune.
    procs.orchestrator(service_env(database_url, QW_RETAIN_FINISHED_SECONDS=str(24 * HOUR), QW_RETENTION_INTERVAL_SECONDS="0.2",
                                   QW_HISTORY_AFTER_SECONDS="0"))
    wait_until(lambda: old not in ids(database_url, "ingest_jobs"), timeout=30, what="the old job pruned")
    assert ids(database_url, "ingest_jobs") == {kept}
