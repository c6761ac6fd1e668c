"""`qw` for operators: readable tables by default, `--json` for scripts, exit codes scripts can use
(0 done, 2 bad input, 3 no such job or not allowed in its state)."""

from __future__ import annotations

import json

import pytest

from queue_workflows import claim_worker, config, node_queue, register_ingest_task, worker_control
from qw_services import cli


@pytest.fixture
def env(database_url, monkeypatch):
    monkeypatch.setenv("QW_DATABASE_URL", database_url)
    monkeypatch.setenv("QW_INGEST_QUEUES", "fetch,load,alpha,beta")
    monkeypatch.setenv("QW_HOST_LABEL", "ops-box")
    monkeypatch.delenv("QW_APP", raising=False)
    config.reset()  # read the environment above, as the command line would
    register_ingest_task("boom", lambda reason: (_ for _ in ()).throw(RuntimeError("disk full")))
    return database_url


def _json(capsys, argv):
    assert cli.main([*argv, "--json"]) == 0
    return json.loads(capsys.readouterr().out)


def test_jobs_job_retry_and_cancel(env, capsys):
    job = node_queue.enqueue_ingest_job("boom", "fetch", {"n": 1}, max_attempts=1)
    assert claim_worker.ClaimWorker("fetch", max_jobs=1).run_forever() == 0

    listed = _json(capsys, ["jobs", "--status", "failed"])
    assert [(j["family"], j["id"], j["status"]) for j in listed] == [("ingest", job["id"], "failed")]
    assert cli.main(["jobs", "--queue", "fetch"]) == 0
    table = capsys.readouterr().out
    assert f"ingest:{job['id']}" in table and "RuntimeError: disk full" in table

    detail = _json(capsys, ["job", f"ingest:{job['id']}"])
    assert detail["job"]["status"] == "failed" and [e["to_status"] for e in detail["events"]] == ["failed"]
    assert detail["job"]["cpu_seconds"] >= 0 and detail["job"]["peak_rss_bytes"] > 0  # what the attempt cost
    assert cli.main(["job", str(job["id"])]) == 0
    shown = capsys.readouterr().out
    assert "disk full" in shown and "running" in shown and "failed" in shown
    assert {"wall_seconds", "cpu_seconds", "peak_rss_bytes"} <= {line.split()[0] for line in shown.splitlines() if line.strip()}

    assert _json(capsys, ["retry", str(job["id"])])["status"] == "queued"
    assert cli.main(["retry", str(job["id"])]) == 3, "a queued job cannot be retried"
    assert "only failed or cancelled" in capsys.readouterr().err
    assert cli.main(["cancel", str(job["id"]), "--reason", "obsolete"]) == 0
    assert "cancelled" in capsys.readouterr().out
    assert cli.main(["cancel", str(job["id"])]) == 3
    assert cli.main(["job", "ingest:424242"]) == 3
    assert cli.main(["job", "nonsense"]) == 2
    assert "ID, ingest:ID or node:ID" in capsys.readouterr().err


def test_worker_on_off_and_status(env, capsys):
    assert cli.main(["worker", "off", "--queue", "fetch", "--policy", "park"]) == 0
    assert "ops-box/fetch: OFF (park)" in capsys.readouterr().out
    assert worker_control.desired_state_for("ops-box", "fetch") == "off"
    assert _json(capsys, ["worker", "on", "--queue", "fetch", "--host", "other"])["desired_state"] == "on"
    assert cli.main(["worker", "off", "--queue", "nope"]) == 2
    assert "unknown ingest queue" in capsys.readouterr().err

    node_queue.enqueue_ingest_job("boom", "alpha")
    data = _json(capsys, ["status"])
    assert data["ingest"]["alpha"]["queued"] == 1 and data["oldest_queued_s"]["alpha"] >= 0
    assert data["workers"] == []
    assert cli.main(["status"]) == 0
    out = capsys.readouterr().out
    assert "oldest" in out and "alpha" in out


def test_workers_table_and_dead_flag(env, conn, capsys):
    conn.execute(
        "INSERT INTO worker_heartbeats (worker_id, host_label, queue, pid, lock_key, state, last_seen, last_flagged_dead_at) "
        "VALUES ('gpu-box:gpu:77:aa', 'gpu-box', 'gpu', 77, 99999, 'busy', now() - interval '5 minutes', now())"
    )
    rows = _json(capsys, ["workers"])
    assert rows[0]["worker_id"] == "gpu-box:gpu:77:aa" and rows[0]["connected"] is False
    assert cli.main(["status"]) == 0
    out = capsys.readouterr().out
    assert "DEAD WORKER? gpu-box:gpu:77:aa" in out and "restart it on gpu-box" in out


def test_runs_and_run(env, capsys):
    from queue_workflows import start_run

    run_id = start_run({"name": "pair", "nodes": [
        {"id": "first", "call": "qw_test_nodes"},
        {"id": "second", "call": "qw_test_nodes", "deps": ["first"]},
    ]}, {"x": 1})
    [listed] = _json(capsys, ["runs"])
    assert (listed["id"], listed["workflow_name"], listed["status"], listed["nodes_total"], listed["active"]) == (run_id, "pair", "running", 2, 1)
    assert cli.main(["runs", "--status", "running"]) == 0
    assert "pair" in capsys.readouterr().out
    status = _json(capsys, ["run", str(run_id)])
    assert {n: v["status"] for n, v in status["nodes"].items()} == {"first": "queued", "second": "pending"}
    assert cli.main(["run", str(run_id)]) == 0
    out = capsys.readouterr().out
    assert f"run {run_id} (pair): running" in out and "second" in out and "pending" in out
    assert cli.main(["run", "999"]) == 3
    with pytest.raises(SystemExit) as bad:  # argparse refuses an unknown status itself
        cli.main(["runs", "--status", "bogus"])
    assert bad.value.code == 2


def test_cancel_restart_and_input_for_runs(env, capsys):
    from queue_workflows import run_status, start_run

    waiting = start_run({"name": "approval", "nodes": [{"id": "approve", "kind": "input"}]}, {})
    assert cli.main(["input", str(waiting), "approve", "--value", "not json"]) == 2
    assert "--value is not JSON" in capsys.readouterr().err
    assert cli.main(["input", str(waiting), "nope", "--value", "{}"]) == 3
    submitted = _json(capsys, ["input", str(waiting), "approve", "--value", '{"approved": true}'])
    assert submitted["run_id"] == waiting and submitted["submission"] > 0

    run_id = start_run({"name": "pair", "nodes": [{"id": "first", "call": "qw_test_nodes"}]}, {})
    assert cli.main(["cancel", f"run:{run_id}", "--reason", "wrong input"]) == 0
    assert f"run {run_id}: cancelled" in capsys.readouterr().out
    assert run_status(run_id)["status"] == "cancelled"
    assert cli.main(["cancel", f"run:{run_id}"]) == 3, "already ended"
    assert cli.main(["cancel", "run:x"]) == 2
    assert _json(capsys, ["restart", str(run_id)])["run_id"] == run_id
    assert run_status(run_id)["status"] == "running" and run_status(run_id)["nodes"]["first"]["status"] == "queued"
    assert cli.main(["restart", "999"]) == 3


def test_run_shows_a_maps_progress_as_done_running_failed_of_n(env, capsys, conn):
    from queue_workflows import start_run
    from queue_workflows.dag.outbox import DispatchDrain

    run_id = start_run({"name": "fan", "nodes": [
        {"id": "m", "kind": "map", "call": "qw_map_nodes:square", "over": list(range(5)), "max_parallel": 3}]}, {})
    items = conn.execute("SELECT id FROM workflow_node_jobs WHERE map_node = 'm' ORDER BY map_index").fetchall()
    node_queue.mark_completed(items[0]["id"], {"sq": 0}, conn=conn)
    conn.execute("UPDATE workflow_node_jobs SET status = 'running', claimed_by = 'w' WHERE id = %s", (items[1]["id"],))
    conn.commit()
    DispatchDrain().drain_once(conn)
    status = _json(capsys, ["run", str(run_id)])
    assert list(status["nodes"]) == ["m"]  # the items are not nodes
    assert status["nodes"]["m"]["map"] == {"total": 5, "done": 1, "running": 1, "failed": 0, "queued": 3}
    assert cli.main(["run", str(run_id)]) == 0
    out = capsys.readouterr().out
    assert "1/1/0 of 5 done/running/failed" in out and "m[0]" not in out
    [listed] = _json(capsys, ["runs"])
    assert (listed["nodes_started"], listed["active"], listed["completed"]) == (1, 1, 0)  # the map's row, not its items
