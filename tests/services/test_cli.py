from __future__ import annotations

import json
import os
import threading

from procs import wait_until

from queue_workflows import config, db, node_queue, register_ingest_task
from queue_workflows.leader.leadership import Elector
from queue_workflows.ops import status
from qw_services import cli


def test_status_json_reports_every_queue(database_url, capsys, monkeypatch):
    monkeypatch.setenv("QW_DATABASE_URL", database_url)
    monkeypatch.setenv("QW_INGEST_QUEUES", "fetch,load,alpha,beta")
    register_ingest_task("t", lambda reason: {})
    node_queue.enqueue_ingest_job("t", "alpha")
    node_queue.enqueue_node_job("n", "gpu", node_module="qw_test_nodes")
    assert cli.main(["status", "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["ingest"]["alpha"]["queued"] == 1 and data["node"]["gpu"]["queued"] == 1
    assert set(data["ingest"]) == {"fetch", "load", "alpha", "beta"}


def test_status_table_and_migrate(scratch_database_url, capsys, monkeypatch):
    monkeypatch.setenv("QW_DATABASE_URL", scratch_database_url)
    assert cli.main(["migrate"]) == 0
    assert f"applied: {[m.version for m in db.discover()]}" in capsys.readouterr().out
    assert cli.main(["status"]) == 0
    out = capsys.readouterr().out
    assert out.splitlines()[0].split() == ["family", "queue", "scheduled", "queued", "running", "completed", "failed", "workers", "oldest"]
    assert ["ingest", "fetch", "0", "0", "0", "0", "0", "0", "-"] in [line.split() for line in out.splitlines()], out
    assert "no orchestrator is running" in out
    assert cli.main(["migrate", "--to", "3"]) == 0
    assert f"reverted: {[m.version for m in reversed(db.discover()) if m.version > 3]}" in capsys.readouterr().out


def test_missing_database_is_exit_2(capsys, monkeypatch):
    monkeypatch.delenv("QW_DATABASE_URL", raising=False)
    assert cli.main(["status"]) == 2
    assert "QW_DATABASE_URL: no database configured" in capsys.readouterr().err


def test_status_lists_the_leading_and_standing_by_orchestrators(database_url, capsys, monkeypatch):
    monkeypatch.setenv("QW_DATABASE_URL", database_url)
    leader, standby = Elector(orchestrator_id="head:1"), Elector(orchestrator_id="head:2", poll_seconds=0.01)
    stop = threading.Event()
    try:
        assert leader.campaign(stop) is not None
        threading.Timer(0.2, stop.set).start()
        assert standby.campaign(stop) is None  # stood by until stopped
        assert cli.main(["status", "--json"]) == 0
        data = json.loads(capsys.readouterr().out)
        assert [(o["orchestrator_id"], o["role"]) for o in data["orchestrators"]] == [("head:1", "leader"), ("head:2", "standby")]
        assert cli.main(["status"]) == 0
        rows = [line.split()[:4] for line in capsys.readouterr().out.splitlines()]
        assert ["head:1", leader_host(), str(os.getpid()), "leader"] in rows
    finally:
        leader.resign()
        standby.resign()


def leader_host() -> str:
    from queue_workflows import config

    return config.current().settings.host_label


def test_status_warns_when_fewer_orchestrators_run_than_expected(database_url, capsys, monkeypatch):
    monkeypatch.setenv("QW_DATABASE_URL", database_url)
    monkeypatch.setenv("QW_EXPECTED_ORCHESTRATORS", "2")
    config.reset()  # the fixture configured the engine before the variable was set
    leader, standby = Elector(orchestrator_id="head:1"), Elector(orchestrator_id="head:2", poll_seconds=0.05)
    stop = threading.Event()
    standing_by = threading.Thread(target=standby.campaign, args=(stop,), daemon=True)
    try:
        assert leader.campaign(stop) is not None
        assert cli.main(["status", "--json"]) == 0
        warnings = json.loads(capsys.readouterr().out)["warnings"]
        assert warnings == ["only 1 of 2 orchestrators running (QW_EXPECTED_ORCHESTRATORS=2): "
                            "start the missing ones (docker compose up -d on the head)"]
        assert cli.main(["status"]) == 0
        assert f"WARNING: {warnings[0]}" in capsys.readouterr().out
        standing_by.start()
        wait_until(lambda: len(status.status_data()["orchestrators"]) == 2, timeout=10, what="the standby's beat")
        assert cli.main(["status", "--json"]) == 0
        assert json.loads(capsys.readouterr().out)["warnings"] == []
    finally:
        stop.set()
        if standing_by.ident is not None:
            standing_by.join(timeout=10)
        leader.resign()
        standby.resign()
