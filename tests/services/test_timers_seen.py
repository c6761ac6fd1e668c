"""Sleeping and waiting nodes as operators see them: `qw run` and the dashboard's run page show the
wake time, the event key and the timeout; `qw event` sends an event and prints the verdict."""

from __future__ import annotations

import json
import warnings

import pytest

with warnings.catch_warnings():  # Starlette 1.x nudges towards httpx2; httpx still works
    warnings.simplefilter("ignore")
    from starlette.testclient import TestClient

from dashboard_helpers import LOCAL
from procs import query

import queue_workflows
from queue_workflows import Workflow, config
from qw_services import cli
from qw_services.dashboard.app import create_app


@pytest.fixture
def env(database_url, monkeypatch):
    monkeypatch.setenv("QW_DATABASE_URL", database_url)
    monkeypatch.delenv("QW_APP", raising=False)
    config.reset()  # read the environment above, as the command line would
    return database_url


def held() -> Workflow:
    return (Workflow("held").sleep("nap", until="2031-02-03T04:05:06Z")
            .wait_event("approval", key="order-7", timeout=3600, default={"approved": False}))


def test_qw_run_shows_the_wake_time_the_key_and_the_timeout(env, capsys):
    run_id = queue_workflows.start_run(held(), {})
    timeout_at = queue_workflows.run_status(run_id)["nodes"]["approval"]["timeout_at"]
    assert cli.main(["run", str(run_id)]) == 0
    out = capsys.readouterr().out
    assert "sleeping until 2031-02-03T04:05:06.000Z" in out
    assert f"waiting for event 'order-7', timeout at {timeout_at.isoformat(timespec='milliseconds').replace('+00:00', 'Z')}" in out
    assert cli.main(["run", str(run_id), "--json"]) == 0
    nodes = json.loads(capsys.readouterr().out)["nodes"]
    assert nodes["nap"]["wake_at"].startswith("2031-02-03 04:05:06") and nodes["approval"]["event_key"] == "order-7"


def test_qw_event_prints_the_verdict_and_refuses_a_duplicate(env, capsys):
    run_id = queue_workflows.start_run(held(), {})
    assert cli.main(["event", "order-7", '{"approved": true}', "--run", str(run_id)]) == 0
    job_id = queue_workflows.run_status(run_id)["nodes"]["approval"]["job_id"]
    assert capsys.readouterr().out.strip().endswith(f"applied to node job(s) {job_id}")
    assert queue_workflows.run_status(run_id)["nodes"]["approval"]["output"] == {"approved": True}
    assert cli.main(["event", "order-7", '{"approved": false}', "--run", str(run_id)]) == 3
    assert f"rejected: node 'approval' of run {run_id} waiting on key 'order-7' is already completed" in capsys.readouterr().out
    assert cli.main(["event", "nobody-waits", "{}"]) == 0
    assert "kept (no node waits on 'nobody-waits' yet" in capsys.readouterr().out
    assert cli.main(["event", "k", "[1]"]) == 2 and "JSON object" in capsys.readouterr().err
    assert cli.main(["event", "k", "{nope"]) == 2 and "not JSON" in capsys.readouterr().err
    assert cli.main(["event", "k", "{}", "--run", "424242"]) == 3 and "no workflow run 424242" in capsys.readouterr().err
    assert query(env, "SELECT count(*) AS n FROM workflow_events")[0]["n"] == 3  # the refused ones wrote nothing


def test_the_run_page_shows_sleeping_and_waiting_nodes(database_url):
    run_id = queue_workflows.start_run(held(), {})
    with TestClient(create_app(), base_url=LOCAL) as client:
        page = client.get(f"/runs/{run_id}").text
    assert '<small class="waits">sleeping until 2031-02-03T04:05:06.000Z</small>' in page
    assert "waiting for event &#39;order-7&#39;, timeout at " in page
    assert "approval (wait_event, cpu): waiting for event" in page  # the drawn box's hover title
