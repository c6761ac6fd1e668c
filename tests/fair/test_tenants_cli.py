"""`qw tenants`: operators see each tenant's queued/running/served share and steer its weight; bad weights change nothing."""

from __future__ import annotations

import json

import pytest

from queue_workflows import config, node_queue, register_ingest_task
from queue_workflows.jobstore import Claimant
from qw_services import cli


@pytest.fixture
def env(database_url, monkeypatch):
    monkeypatch.setenv("QW_DATABASE_URL", database_url)
    monkeypatch.delenv("QW_APP", raising=False)
    config.reset()
    register_ingest_task("t", lambda reason, args: args)
    return database_url


def _json(capsys, argv):
    assert cli.main([*argv, "--json"]) == 0
    return json.loads(capsys.readouterr().out)


def test_tenants_shows_shares_and_sets_weights(env, conn, capsys):
    assert cli.main(["tenants", "--weight", "acme", "3"]) == 0
    assert "tenant 'acme': weight 3" in capsys.readouterr().out
    node_queue.enqueue_ingest_jobs([{"task_name": "t", "queue": "fetch", "tenant": t} for t in ("acme",) * 6 + ("zeta",) * 6])
    for _ in range(4):
        node_queue.claim_ingest_job("fetch", Claimant("w", 1))
    rows = {r["tenant"]: r for r in _json(capsys, ["tenants", "--queue", "fetch"])}
    assert (rows["acme"]["queued"], rows["acme"]["running"], rows["acme"]["served"], rows["acme"]["weight"]) == (3, 3, 3, 3.0)
    assert (rows["zeta"]["queued"], rows["zeta"]["running"], rows["zeta"]["served"], rows["zeta"]["weight"]) == (5, 1, 1, 1.0)
    assert float(rows["acme"]["served_share"]) == 0.75 and float(rows["acme"]["weight_share"]) == 0.75
    assert cli.main(["tenants"]) == 0
    table = capsys.readouterr().out
    assert "acme" in table and "75.0%" in table
    assert cli.main(["status"]) == 0
    assert "fair share on fetch: 2 tenants with work: acme 3 queued, served 75.0% (weight 75.0%); zeta 5 queued" in capsys.readouterr().out
    assert cli.main(["tenants", "--clear-weight", "acme"]) == 0
    assert conn.execute("SELECT count(*) AS n FROM tenant_weights").fetchone()["n"] == 0


@pytest.mark.parametrize("bad", ["0", "-2", "nan", "inf", "1e9", "heavy"])
def test_a_bad_weight_is_refused_with_exit_2_and_changes_nothing(env, conn, capsys, bad):
    assert cli.main(["tenants", "--weight", "acme", "2"]) == 0
    assert cli.main(["tenants", "--weight", "acme", bad]) == 2
    assert "error: tenant 'acme': weight must be a number above 0 and at most 10000" in capsys.readouterr().err
    assert conn.execute("SELECT weight FROM tenant_weights WHERE tenant = 'acme'").fetchone()["weight"] == 2
