from __future__ import annotations

import json

from qw_services import cli

from queue_workflows import db, node_queue, register_ingest_task


def test_status_json_reports_every_queue(database_url, capsys, monkeypatch):
    monkeypatch.setenv("QW_DATABASE_URL", database_url)
    monkeypatch.setenv("QW_INGEST_QUEUES", "fetch,load,alpha,beta")
    register_ingest_task("t", lambda reason: {})
    node_queue.enqueue_ingest_job("t", "alpha")
    node_queue.enqueue_node_job("n", "gpu")
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
    assert cli.main(["migrate", "--to", "3"]) == 0
    assert f"reverted: {[m.version for m in reversed(db.discover()) if m.version > 3]}" in capsys.readouterr().out


def test_missing_database_is_exit_2(capsys, monkeypatch):
    monkeypatch.delenv("QW_DATABASE_URL", raising=False)
    assert cli.main(["status"]) == 2
    assert "QW_DATABASE_URL: no database configured" in capsys.readouterr().err
