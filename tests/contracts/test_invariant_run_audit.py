"""Every run action is recorded with who and when: `cancel_run`, `restart_run` and
`submit_input` append to `workflow_run_actions` in the transaction of the change itself, so a
refused or rolled-back action leaves no row and a landed one always has its row."""

from __future__ import annotations

import json
import subprocess
import sys

import psycopg
import pytest
from procs import query, service_env

import queue_workflows
from queue_workflows import InvalidPayloadError, run_actions
from queue_workflows.dag import RunStateError, Workflow, cancel_run, restart_run, submit_input

N = "qw_dag_nodes"


def _run_with_an_input_step() -> int:
    wf = Workflow("audited").node("ask", input=True).node("after", f"{N}:echo", deps=["ask"])
    return queue_workflows.start_run(wf, {})


def _trail(database_url: str, run_id: int) -> list[tuple[str, str | None, str | None]]:
    return [(a["action"], a["node_name"], a["requested_by"])
            for a in query(database_url, "SELECT * FROM workflow_run_actions WHERE run_id = %s ORDER BY id", (run_id,))]


def test_cancel_restart_and_input_are_recorded_with_who_and_when(database_url):
    run_id = _run_with_an_input_step()
    submission = submit_input(run_id, "ask", {"ok": True}, requested_by="carol")
    cancel_run(run_id, reason="changed my mind", requested_by="dave")
    restart_run(run_id, requested_by="erin")
    assert _trail(database_url, run_id) == [("input", "ask", "carol"), ("cancel", None, "dave"), ("restart", None, "erin")]
    actions = run_actions(run_id)
    assert actions[0]["detail"] == f"submission {submission}"
    assert actions[1]["detail"] == "changed my mind" and actions[2]["detail"] == "was cancelled; 1 unapplied input answer(s) rejected"
    assert all(a["at"] is not None for a in actions)
    assert [a["at"] for a in actions] == sorted(a["at"] for a in actions)


def test_a_refused_action_leaves_no_row(database_url):
    run_id = _run_with_an_input_step()
    with pytest.raises(RunStateError):
        restart_run(run_id, requested_by="mallory")  # still running
    with pytest.raises(InvalidPayloadError, match="requested_by"):
        cancel_run(run_id, requested_by="x" * 500)
    with pytest.raises(InvalidPayloadError, match="requested_by"):
        submit_input(run_id, "ask", {"ok": True}, requested_by="bad\x00name")
    assert _trail(database_url, run_id) == []
    assert query(database_url, "SELECT status FROM workflow_runs WHERE id = %s", (run_id,))[0]["status"] == "running"
    assert query(database_url, "SELECT count(*) AS n FROM workflow_input_submissions")[0]["n"] == 0


def test_an_action_rolled_back_with_the_callers_transaction_leaves_no_row(database_url):
    run_id = _run_with_an_input_step()
    with psycopg.connect(database_url) as conn:
        cancel_run(run_id, requested_by="frank", conn=conn)
        assert _trail(database_url, run_id) == []  # not visible before the caller commits
        conn.rollback()
    assert _trail(database_url, run_id) == []
    assert query(database_url, "SELECT status FROM workflow_runs WHERE id = %s", (run_id,))[0]["status"] == "running"


def test_the_qw_tool_records_the_operator_and_shows_the_trail(database_url):
    run_id = _run_with_an_input_step()

    def qw(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([sys.executable, "-m", "qw_services.cli", *args], env=service_env(database_url),
                              capture_output=True, text=True, timeout=60)

    assert qw("cancel", f"run:{run_id}", "--reason", "from the shell").returncode == 0
    shown = qw("run", str(run_id), "--json")
    assert shown.returncode == 0, shown.stderr
    [action] = json.loads(shown.stdout)["actions"]
    assert action["action"] == "cancel" and "@" in action["requested_by"] and action["detail"] == "from the shell"
    table = qw("run", str(run_id))
    assert "cancel" in table.stdout and action["requested_by"] in table.stdout
