"""Input steps: a node that waits for a submitted value; the input listener resumes it.

The run waits (`awaiting_input`, never claimed); a submission - `submit_input` or a plain SQL
INSERT - is applied in one transaction (node completed with the value as its output, its outbox
event, submission applied); a bad one is refused (API) or rejected (listener) and changes
nothing; a submission stuck in processing is reclaimed.
"""

from __future__ import annotations

import psycopg
import pytest
from dag_rows import approval, complete, rows, states
from procs import Procs, query, service_env, wait_for_log, wait_until, wait_workers_ready

import queue_workflows
from queue_workflows import InvalidPayloadError
from queue_workflows.dag import (
    InputNotAwaitedError,
    Workflow,
    WorkflowValidationError,
    cancel_run,
    inputs,
    restart_run,
    submit_input,
    validate,
)
from queue_workflows.dag.outbox import DispatchDrain

N = "qw_dag_nodes"
C = "qw_dag_cancel_nodes"


def submissions(url):
    return query(url, "SELECT * FROM workflow_input_submissions ORDER BY id")


def test_input_steps_validate_in_both_forms():
    wf = validate({"name": "d", "nodes": [{"id": "a", "kind": "input"}, {"id": "b", "call": f"{N}:echo", "deps": ["a"]}]})
    assert wf.by_id()["a"].is_input and wf.to_dict()["nodes"][0]["kind"] == "input"
    assert validate(approval()).by_id()["ask"].is_input
    for bad, message in [
        ({"id": "a", "kind": "input", "call": f"{N}:echo"}, "an input step runs nothing: give it no 'call'"),
        ({"id": "a", "kind": "input", "queue": "gpu", "model": "m"}, "an input step takes no queue or model"),
        ({"id": "a", "kind": "human", "call": f"{N}:echo"}, "kind must be one of 'task', 'input', 'workflow', 'map', 'sleep', 'wait_event', not 'human'"),
        ({"id": "a"}, "'call' must be 'pkg.module' or 'pkg.module:function', not None"),
    ]:
        with pytest.raises(WorkflowValidationError, match=f"node 'a': {message}"):
            validate({"name": "d", "nodes": [bad]})


def test_the_run_waits_and_a_plain_sql_submission_resumes_it(database_url, conn):
    run_id = queue_workflows.start_run(approval(), {})
    complete(database_url, conn, run_id, "draft", {"echo": {"v": 1}})
    ask = rows(database_url, run_id)["ask"]
    assert (ask["status"], ask["inputs"]) == ("awaiting_input", {"prompt": "ok?", "draft": {"v": 1}})
    assert query(database_url, "SELECT count(*) AS n FROM workflow_node_jobs WHERE status = 'queued'") == [{"n": 0}]  # nothing to claim
    with psycopg.connect(database_url, autocommit=True) as listener:
        listener.execute("LISTEN qw_input")
        with psycopg.connect(database_url) as anyone:  # no engine code: plain SQL
            anyone.execute("INSERT INTO workflow_input_submissions (run_id, node_name, value) VALUES (%s, 'ask', %s)",
                           (run_id, '{"approver": "ann"}'))
        assert [n.payload for n in listener.notifies(timeout=2, stop_after=1)] == [str(run_id)]
    assert inputs.process_inputs(conn) == 1
    ask = rows(database_url, run_id)["ask"]
    assert (ask["status"], ask["context_delta"]) == ("completed", {"approver": "ann"})
    [sub] = submissions(database_url)
    assert (sub["status"], sub["error"], sub["attempts"]) == ("applied", None, 1) and sub["processed_at"] is not None
    assert query(database_url, "SELECT node_name, kind FROM workflow_dispatch_events WHERE node_name = 'ask'") == [{"node_name": "ask", "kind": "completed"}]
    DispatchDrain().drain_once(conn)
    assert rows(database_url, run_id)["publish"]["inputs"] == {"by": "ann"}
    complete(database_url, conn, run_id, "publish", {"done": True})
    assert queue_workflows.run_status(run_id)["status"] == "completed"


def test_a_bad_submission_is_refused_with_a_clear_error_and_changes_nothing(database_url, conn):
    run_id = queue_workflows.start_run(approval(), {})
    for args, error, message in [
        ((run_id, "ask", {"x": 1}), InputNotAwaitedError, "node 'ask' of run .* is pending \\(not reached yet\\), not awaiting input"),
        ((run_id, "draft", {"x": 1}), InputNotAwaitedError, "node 'draft' of run .* is not an input step"),
        ((run_id, "nope", {"x": 1}), InputNotAwaitedError, "has no node 'nope'"),
        ((999999, "ask", {"x": 1}), InputNotAwaitedError, "no workflow run 999999"),
    ]:
        with pytest.raises(error, match=message):
            submit_input(*args)
    complete(database_url, conn, run_id, "draft", {"echo": {}})
    for value, message in [([1, 2], "must be a JSON object .* not list"), ("yes", "not str"), ({"bad": float("nan")}, "input value is not JSON-serialisable")]:
        with pytest.raises(InvalidPayloadError, match=message):
            submit_input(run_id, "ask", value)
    assert submissions(database_url) == []
    # a plain-SQL submission the API would have refused is rejected by the listener, naming why
    conn.execute("INSERT INTO workflow_input_submissions (run_id, node_name, value) VALUES (%s, 'ask', '[1]'), (%s, 'draft', '{}')",
                 (run_id, run_id))
    assert inputs.process_inputs(conn) == 2
    got = [(s["status"], s["error"]) for s in submissions(database_url)]
    assert got == [("rejected", "an input value must be a JSON object, not list"),
                   ("rejected", f"node 'draft' of run {run_id} is not an input step")]
    assert states(database_url, run_id) == {"draft": "completed", "ask": "awaiting_input"}
    sub_id = submit_input(run_id, "ask", {"approver": "bob"})
    second = submit_input(run_id, "ask", {"approver": "eve"})  # both accepted while it waits: the first applied wins
    assert inputs.process_inputs(conn) == 2
    assert [(s["id"], s["status"]) for s in submissions(database_url)[2:]] == [(sub_id, "applied"), (second, "rejected")]
    assert rows(database_url, run_id)["ask"]["context_delta"] == {"approver": "bob"}
    with pytest.raises(InputNotAwaitedError, match="node 'ask' of run .* is completed, not awaiting input"):
        submit_input(run_id, "ask", {"approver": "late"})


def test_a_submission_stuck_in_processing_is_reclaimed(database_url, conn):
    run_id = queue_workflows.start_run(approval(), {})
    complete(database_url, conn, run_id, "draft", {"echo": {}})
    sub_id = submit_input(run_id, "ask", {"approver": "ann"})
    [claimed] = inputs.claim_submissions(conn, "dead-listener")  # ... and the listener dies before applying it
    assert claimed["id"] == sub_id and submissions(database_url)[0]["status"] == "processing"
    assert inputs.process_inputs(conn, "new-listener", stale_seconds=30) == 0  # not stale yet: left alone
    assert submissions(database_url)[0]["claimed_by"] == "dead-listener"
    conn.execute("UPDATE workflow_input_submissions SET claimed_at = now() - interval '31 s'")
    assert inputs.process_inputs(conn, "new-listener", stale_seconds=30) == 1
    [sub] = submissions(database_url)
    assert (sub["status"], sub["attempts"], sub["claimed_by"]) == ("applied", 2, "new-listener")
    assert inputs.apply_submission(conn, sub_id, "dead-listener") is None  # the old claim is void
    assert rows(database_url, run_id)["ask"]["context_delta"] == {"approver": "ann"}
    assert query(database_url, "SELECT count(*) AS n FROM workflow_dispatch_events WHERE node_name = 'ask'") == [{"n": 1}]
    # one that keeps getting stuck is given up after max_attempts claims, not retried forever
    conn.execute("INSERT INTO workflow_input_submissions (run_id, node_name, value, status, attempts, claimed_at)"
                 " VALUES (%s, 'ask', '{}', 'processing', 5, now() - interval '1 h')", (run_id,))
    [gave_up] = inputs.reclaim_submissions(conn, stale_seconds=30, max_attempts=5)
    assert gave_up["status"] == "rejected" and "gave up after 5 claims" in submissions(database_url)[1]["error"]


def test_cancel_and_restart_with_an_input_step(database_url, conn):
    run_id = queue_workflows.start_run(approval(), {})
    complete(database_url, conn, run_id, "draft", {"echo": {}})
    submit_input(run_id, "ask", {"approver": "ann"})
    cancel_run(run_id)  # before the listener got to it
    assert states(database_url, run_id) == {"draft": "completed", "ask": "cancelled"}
    assert inputs.process_inputs(conn) == 1
    assert submissions(database_url)[0]["status"] == "rejected" and "is cancelled: it takes no input" in submissions(database_url)[0]["error"]
    with pytest.raises(InputNotAwaitedError, match="is cancelled: it takes no input"):
        submit_input(run_id, "ask", {"approver": "ann"})
    assert restart_run(run_id)["reset"] == ["ask"]
    assert states(database_url, run_id) == {"draft": "completed", "ask": "awaiting_input"}  # waiting again, not queued
    submit_input(run_id, "ask", {"approver": "ann"})
    assert inputs.process_inputs(conn) == 1 and states(database_url, run_id)["ask"] == "completed"


@pytest.mark.multiprocess
def test_input_step_end_to_end_on_real_processes(database_url, procs: Procs):
    env = service_env(database_url)
    orchestrator = procs.orchestrator(env)
    workers = [procs.worker(env, "cpu")]
    wait_workers_ready(database_url, workers)
    wait_for_log(orchestrator, "orchestrator running", timeout=30)
    wf = (Workflow("e2e_input").node("draft", f"{C}:use", inputs={"label": "draft"})
          .node("ask", deps=["draft"], input=True).node("publish", f"{C}:use", deps=["ask"], inputs={"label": "publish", "by": {"$from": "ask.approver"}}))
    run_id = queue_workflows.start_run(wf, {})
    wait_until(lambda: states(database_url, run_id).get("ask") == "awaiting_input", timeout=15, what=f"the input step\n{procs.logs()}")
    assert queue_workflows.run_status(run_id)["status"] == "running"
    query(database_url, "INSERT INTO workflow_input_submissions (run_id, node_name, value) VALUES (%s, 'ask', %s)", (run_id, '{"approver": "ann"}'))
    status = wait_until(lambda: (s := queue_workflows.run_status(run_id))["status"] == "completed" and s, timeout=15,
                        what=f"the run to finish after the submission\n{procs.logs()}")
    assert status["nodes"]["ask"]["output"] == {"approver": "ann"}
    assert status["nodes"]["publish"]["output"]["used"] == {"label": "publish", "by": "ann"}
