"""A DAG run never acts on stale state: an input answer from before a restart, a node that
shadows the run context, a definition that can never be advanced."""

from __future__ import annotations

import logging

import pytest
from dag_rows import rows, run_row, states
from procs import Procs, log_text, query, service_env, wait_for_log, wait_until

import queue_workflows
from queue_workflows.dag import Workflow, WorkflowValidationError, cancel_run, inputs, reconcile_runs, restart_run, submit_input, validate
from queue_workflows.dag.outbox import DispatchDrain

N = "qw_dag_nodes"


def submissions(url: str) -> list[dict]:
    return query(url, "SELECT * FROM workflow_input_submissions ORDER BY id")


def approval() -> Workflow:
    return Workflow("approve").node("draft", f"{N}:echo", inputs={"v": 1}).node("ask", deps=["draft"], input=True)


def at_the_input_step(url: str, conn) -> int:
    from queue_workflows import node_queue

    run_id = queue_workflows.start_run(approval(), {})
    node_queue.mark_completed(rows(url, run_id)["draft"]["id"], {"echo": {}}, conn=conn)
    DispatchDrain().drain_once(conn)
    assert states(url, run_id) == {"draft": "completed", "ask": "awaiting_input"}
    return run_id


# --- finding 11: an answer to the run's previous life ---------------------------------------


def test_an_answer_submitted_before_cancel_and_restart_is_not_applied_to_the_restarted_step(database_url, conn):
    run_id = at_the_input_step(database_url, conn)
    old = submit_input(run_id, "ask", {"approver": "ann"})  # the orchestrator is down: nobody applies it
    cancel_run(run_id)
    assert restart_run(run_id)["reset"] == ["ask"]
    [sub] = submissions(database_url)
    assert (sub["id"], sub["status"]) == (old, "rejected")
    assert sub["error"] == f"run {run_id} was restarted before this answer was applied: submit it again"
    assert inputs.process_inputs(conn) == 0  # the listener comes back: nothing of the old life to apply
    assert states(database_url, run_id) == {"draft": "completed", "ask": "awaiting_input"}
    assert queue_workflows.run_actions(run_id)[-1]["detail"] == "was cancelled; 1 unapplied input answer(s) rejected"
    new = submit_input(run_id, "ask", {"approver": "bob"})  # a new answer is what resumes it
    assert inputs.process_inputs(conn) == 1
    assert [(s["id"], s["status"]) for s in submissions(database_url)] == [(old, "rejected"), (new, "applied")]
    assert rows(database_url, run_id)["ask"]["context_delta"] == {"approver": "bob"}


def test_an_answer_claimed_by_a_listener_that_died_is_not_applied_after_a_restart(database_url, conn):
    run_id = at_the_input_step(database_url, conn)
    sub_id = submit_input(run_id, "ask", {"approver": "ann"})
    inputs.claim_submissions(conn, "dead-listener")  # claimed, then its orchestrator died
    cancel_run(run_id)
    restart_run(run_id)
    conn.execute("UPDATE workflow_input_submissions SET claimed_at = now() - interval '1 h'")  # long stale
    assert inputs.apply_submission(conn, sub_id, "dead-listener") is None
    assert inputs.process_inputs(conn, "new-listener") == 0
    assert submissions(database_url)[0]["status"] == "rejected"
    assert states(database_url, run_id)["ask"] == "awaiting_input"


@pytest.mark.multiprocess
def test_the_orchestrator_started_after_a_restart_leaves_the_step_waiting(database_url, conn, procs: Procs):
    run_id = at_the_input_step(database_url, conn)
    submit_input(run_id, "ask", {"approver": "ann"})
    cancel_run(run_id)
    restart_run(run_id)
    orchestrator = procs.orchestrator(service_env(database_url))
    wait_for_log(orchestrator, "orchestrator running", timeout=30)
    fresh = submit_input(run_id, "ask", {"approver": "bob"})  # applied by the live listener: the old one was not
    wait_until(lambda: submissions(database_url)[-1]["status"] == "applied", timeout=15, what=f"the new answer\n{procs.logs()}")
    assert [(s["id"] == fresh, s["status"]) for s in submissions(database_url)] == [(False, "rejected"), (True, "applied")]
    assert rows(database_url, run_id)["ask"]["context_delta"] == {"approver": "bob"}


# --- finding 12: `context` is the run context, never a node ---------------------------------


def test_a_node_cannot_be_named_context(database_url, conn):
    wf = Workflow("shadow").node("context", f"{N}:echo").node("use", f"{N}:echo", deps=["context"], inputs={"v": {"$from": "context.value"}})
    with pytest.raises(WorkflowValidationError, match="node 'context': the id 'context' is reserved"):
        queue_workflows.start_run(wf, {"value": "from the run context"})
    with pytest.raises(WorkflowValidationError, match="is reserved"):
        validate({"name": "d", "nodes": [{"id": "context", "kind": "input"}]})
    assert query(database_url, "SELECT count(*) AS n FROM workflow_runs") == [{"n": 0}]
    validate(Workflow("fine").node("contexts", f"{N}:echo").node("context_2", f"{N}:echo"))  # only the exact name


# --- finding 14: a definition that can never be advanced ------------------------------------


def retry_due(url: str) -> None:
    """The time condition of the sweep's backoff, driven instead of waited for."""
    query(url, "UPDATE workflow_runs SET reconcile_next_at = now() - interval '1 second' WHERE reconcile_next_at IS NOT NULL")


def test_a_cyclic_definition_written_by_sql_is_poison_flagged_by_the_sweep(database_url, conn, caplog):
    cyclic = '{"name": "cyc", "nodes": [{"id": "a", "call": "qw_dag_nodes:echo", "deps": ["b"]}, {"id": "b", "call": "qw_dag_nodes:echo", "deps": ["a"]}]}'
    [bad] = query(database_url, "INSERT INTO workflow_runs (workflow_name, status, definition) VALUES ('cyc', 'running', %s) RETURNING id", (cyclic,))
    run_id = bad["id"]
    caplog.set_level(logging.WARNING, logger="queue_workflows.dag.control")
    assert reconcile_runs(conn, max_attempts=2) == []
    assert run_row(database_url, run_id)["poisoned_at"] is None  # once may be bad luck
    retry_due(database_url)
    assert reconcile_runs(conn, max_attempts=2) == []
    run = run_row(database_url, run_id)
    assert run["poisoned_at"] is not None and run["status"] == "running"
    assert run["error"].startswith("reconcile poisoned after 2 attempts: WorkflowValidationError: workflow 'cyc': cycle among ['a', 'b']")
    caplog.clear()
    assert reconcile_runs(conn, max_attempts=2) == []  # flagged: the sweep no longer retries it
    assert caplog.records == []
    assert queue_workflows.run_status(run_id)["poisoned_at"] is not None  # what an operator sees


def test_the_sweep_logs_one_line_per_failure_without_a_traceback(database_url, conn, caplog):
    cyclic = '{"name": "cyc", "nodes": [{"id": "a", "call": "qw_dag_nodes:echo", "deps": ["a"]}]}'
    [bad] = query(database_url, "INSERT INTO workflow_runs (workflow_name, status, definition) VALUES ('cyc', 'running', %s) RETURNING id", (cyclic,))
    caplog.set_level(logging.WARNING, logger="queue_workflows.dag.control")
    reconcile_runs(conn, max_attempts=2)
    retry_due(database_url)
    reconcile_runs(conn, max_attempts=2)
    got = [(r.levelname, r.exc_info, r.getMessage()) for r in caplog.records]
    assert [(level, exc) for level, exc, _ in got] == [("WARNING", None), ("ERROR", None)]
    assert f"reconcile: run {bad['id']} could not be advanced (attempt 1/2, retry in 5s): WorkflowValidationError" in got[0][2]
    assert f"run {bad['id']}: reconcile POISONED after 2 attempts" in got[1][2]
    assert all("\n" not in message for _, _, message in got)


@pytest.mark.multiprocess
@pytest.mark.soak  # over 10 s: the soak stage runs it (.ci/run), the default run stays under 4 minutes
def test_the_orchestrator_poison_flags_a_cyclic_run_once_with_one_line_per_sweep(database_url, procs: Procs):
    cyclic = '{"name": "cyc", "nodes": [{"id": "a", "call": "qw_dag_nodes:echo", "deps": ["b"]}, {"id": "b", "call": "qw_dag_nodes:echo", "deps": ["a"]}]}'
    orchestrator = procs.orchestrator(service_env(database_url, QW_DISPATCH_MAX_ATTEMPTS="2"))
    wait_for_log(orchestrator, "orchestrator running", timeout=30)
    [bad] = query(database_url, "INSERT INTO workflow_runs (workflow_name, status, definition) VALUES ('cyc', 'running', %s) RETURNING id", (cyclic,))
    wait_until(lambda: run_row(database_url, bad["id"])["poisoned_at"] is not None, timeout=20, what=f"the poison flag\n{procs.logs()}")
    log = log_text(orchestrator)
    assert "Traceback" not in log
    assert log.count(f"reconcile: run {bad['id']} could not be advanced (attempt 1/2, retry in 5s)") == 1
    assert log.count(f"run {bad['id']}: reconcile POISONED after 2 attempts") == 1
