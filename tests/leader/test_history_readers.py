"""Every reader of finished jobs finds a job after the leader moved it to history, through its public entry point."""

from __future__ import annotations

import json
from collections.abc import Iterator

import pytest
from procs import TEST_INGEST_QUEUES, query

import queue_workflows
from queue_workflows import config, db, node_queue, register_ingest_task
from queue_workflows.dag import Workflow
from queue_workflows.dag.outbox import DispatchDrain
from queue_workflows.leader import history
from queue_workflows.ops import costs, overview
from queue_workflows.telemetry.store import OutcomeCounter
from qw_services import cli, dev

N = "qw_dag_nodes"


@pytest.fixture
def env(database_url: str, monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    monkeypatch.setenv("QW_DATABASE_URL", database_url)
    monkeypatch.setenv("QW_INGEST_QUEUES", ",".join(TEST_INGEST_QUEUES))
    monkeypatch.setenv("QW_HISTORY_AFTER_SECONDS", "60")
    monkeypatch.setenv("QW_DEDUP_WINDOW_SECONDS", "3600")
    monkeypatch.delenv("QW_APP", raising=False)
    config.reset()
    register_ingest_task("t", lambda reason: {})
    yield database_url


def finished_job(url: str, status: str = "failed", **fields: object) -> int:
    job = node_queue.enqueue_ingest_job("t", "fetch", {"n": 1}, **fields)  # type: ignore[arg-type]
    query(url, "UPDATE ingest_jobs SET status = %s, error = 'boom', cpu_seconds = 2.5, wall_seconds = 3, claimed_by = 'h1:w', "
               "started_at = now() - interval '10 minutes', finished_at = now() - interval '5 minutes' WHERE id = %s", (status, job["id"]))
    return int(job["id"])


def move(url: str) -> None:
    with db.connect(autocommit=True, url=url) as conn:
        moved, _ = history.move_once(conn)
    assert sum(moved.values()) >= 1
    assert query(url, "SELECT count(*) AS n FROM ingest_jobs WHERE status IN ('completed', 'failed', 'cancelled')")[0]["n"] == 0


def test_qw_job_and_qw_jobs_find_a_moved_job_and_retry_brings_it_back(env, capsys):
    job = finished_job(env)
    move(env)
    assert cli.main(["job", f"ingest:{job}", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["job"]["status"] == "failed"
    assert cli.main(["jobs", "--status", "failed", "--json"]) == 0
    assert [j["id"] for j in json.loads(capsys.readouterr().out)] == [job]
    assert cli.main(["cancel", str(job)]) == 3  # found, and refused as finished, not "no job"
    assert "is failed" in capsys.readouterr().err
    assert cli.main(["retry", str(job), "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["status"] == "queued"
    assert query(env, "SELECT status FROM ingest_jobs WHERE id = %s", (job,)) == [{"status": "queued"}]
    assert query(env, "SELECT count(*) AS n FROM ingest_jobs_history")[0]["n"] == 0


def test_a_dedup_key_held_by_a_moved_job_still_dedups_within_the_window(env):
    job = finished_job(env, status="completed", dedup_key="once")
    move(env)
    again = node_queue.enqueue_ingest_job("t", "fetch", {"n": 2}, dedup_key="once")
    assert again["id"] == job and again["status"] == "completed"


def test_costs_the_outcome_counters_the_throughput_chart_and_the_demo_totals_count_moved_jobs(env):
    job = finished_job(env, status="completed")
    move(env)
    assert overview.throughput()["fetch"]["completed_15m"] == 1  # the dashboard's per-minute chart
    assert dev._demo_totals({"ingest_jobs": [job]})["completed"] == 1  # `qw dev`'s closing totals
    report = costs.cost_report(by="queue", since="1h")
    assert report["totals"]["jobs"] == 1 and report["totals"]["cpu_seconds"] == 2.5
    counters = OutcomeCounter(lag_seconds=0)
    counters._since = query(env, "SELECT extract(epoch FROM now() - interval '1 hour')::float AS t")[0]["t"]
    with db.connect(autocommit=True, url=env) as conn:
        counters.advance(conn)
    assert counters.totals.get(("ingest", "fetch", "completed")) == 1


def test_a_moved_runs_outputs_events_qw_runs_and_dashboard_pages(env, capsys):
    from starlette.testclient import TestClient

    from qw_services.dashboard.app import create_app

    run = queue_workflows.start_run(Workflow("w").node("a", f"{N}:echo"), {})
    query(env, "INSERT INTO job_events (job_table, job_id, from_status, to_status, attempts) "
               "SELECT 'workflow_node_jobs', id, 'running', 'queued', 1 FROM workflow_node_jobs WHERE run_id = %s", (run,))  # a requeue
    query(env, "UPDATE workflow_node_jobs SET status = 'completed', finished_at = now() - interval '5 minutes', "
               "context_delta = '{\"y\": 2}' WHERE run_id = %s", (run,))
    with db.connect(autocommit=True, url=env) as conn:
        DispatchDrain().drain_once(conn)
    query(env, "UPDATE workflow_runs SET finished_at = now() - interval '5 minutes' WHERE id = %s", (run,))
    with db.connect(autocommit=True, url=env) as conn:
        assert history.move_once(conn)[0]["move_run_node_jobs"] == 1
    assert queue_workflows.run_status(run)["nodes"]["a"]["output"] == {"y": 2}
    assert [(e["node_name"], e["to_status"]) for e in query(env, "SELECT node_name, to_status FROM node_events WHERE run_id = %s ORDER BY id", (run,))] == [
        ("a", "queued"), ("a", "completed")]
    assert cli.main(["runs", "--json"]) == 0
    assert [(r["id"], r["completed"], r["nodes_started"]) for r in json.loads(capsys.readouterr().out)] == [(run, 1, 1)]
    node = query(env, "SELECT id FROM workflow_node_jobs_history")[0]["id"]
    with TestClient(create_app(password="pw-for-history-test"), base_url="http://127.0.0.1:8765") as client:
        story = client.get(f"/jobs/node:{node}")
        assert story.status_code == 200 and "completed" in story.text
        page = client.get(f"/runs/{run}").text
        assert "completed" in page and 'pending' not in page.split("run-actions")[0].lower()
        found = client.get("/jobs", params={"status": "completed"}).text
        assert f"node:{node}" in found
