"""`qw keys` and the flow line of `qw status`: operators see keys against their limits and steer them."""

from __future__ import annotations

import json

import pytest
from procs import query

from queue_workflows import config, node_queue, register_ingest_task
from queue_workflows.jobstore import Claimant
from qw_services import cli


@pytest.fixture
def env(database_url, monkeypatch):
    monkeypatch.setenv("QW_DATABASE_URL", database_url)
    monkeypatch.setenv("QW_INGEST_QUEUES", "fetch,load,alpha,beta")
    monkeypatch.delenv("QW_APP", raising=False)
    config.reset()
    register_ingest_task("noop", lambda reason: {})
    return database_url


def test_set_list_status_and_clear(env, capsys):
    assert cli.main(["keys", "set", "fetch", "--max-running", "1", "--rate", "5/s", "--key-path", "args.basin"]) == 0
    assert "max_running 1, rate 5/1s, key args.basin" in capsys.readouterr().out
    for basin in ("a", "a", "b"):
        node_queue.enqueue_ingest_job("noop", "fetch", {"basin": basin})
    while node_queue.claim_ingest_job("fetch", Claimant("w", 1)) is not None:
        pass
    assert cli.main(["keys", "--json"]) == 0
    listed = json.loads(capsys.readouterr().out)
    assert {(k["key"], k["running"], k["max_running"]) for k in listed["keys"]} == {("a", 1, 1), ("b", 1, 1)}
    assert all(k["tokens"] is not None and 0 <= k["tokens"] <= 5 and k["rate_count"] == 5 for k in listed["keys"])
    assert cli.main(["keys"]) == 0
    assert "1/1" in capsys.readouterr().out
    assert cli.main(["status"]) == 0
    assert "flow limits on fetch: 1 limit(s), 2 running under them on 2 key(s), 2 key(s) at their limit" in capsys.readouterr().out
    assert cli.main(["keys", "clear", "fetch"]) == 0
    assert query(env, "SELECT count(*) AS n FROM flow_limits")[0]["n"] == 0


def test_a_bad_limit_exits_2_naming_it_and_changes_nothing(env, capsys):
    assert cli.main(["keys", "set", "fetch", "--max-running", "2"]) == 0
    capsys.readouterr()
    assert cli.main(["keys", "set", "fetch", "--max-running", "-3"]) == 2
    assert "flow limit on queue 'fetch': max_running must be a whole number 0 or more, not -3" in capsys.readouterr().err
    assert cli.main(["keys", "set", "fetch", "--rate", "ten/s"]) == 2
    assert "rate 'ten/s' is not 'N/interval'" in capsys.readouterr().err
    assert query(env, "SELECT max_running, rate_count FROM flow_limits") == [{"max_running": 2, "rate_count": None}]


def test_the_dashboard_queues_panel_shows_keys_against_their_limits(env):
    from queue_workflows.ops.flow import set_flow_limit
    from qw_services.dashboard import views

    set_flow_limit("fetch", max_running=2, rate="10/s", key_path="args.basin")
    node_queue.enqueue_ingest_job("noop", "fetch", {"basin": "rhine"})
    assert node_queue.claim_ingest_job("fetch", Claimant("w", 1)) is not None
    html = views.panels(views.make_templates())["queues"]
    assert 'data-key="rhine"' in html and "1 / 2" in html and "per 1.0s" in html
