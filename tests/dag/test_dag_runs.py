"""start_run / run_status and node execution, in process: the dispatcher's writes and the worker's invoke."""

from __future__ import annotations

from contextlib import contextmanager

import psycopg
import pytest
from procs import query

import queue_workflows
from queue_workflows import node_queue, testing
from queue_workflows.dag import Workflow, WorkflowValidationError
from queue_workflows.dag.outbox import DispatchDrain

N = "qw_dag_nodes"


def nodes(url, run_id):
    return {r["node_name"]: r for r in query(url, "SELECT * FROM workflow_node_jobs WHERE run_id = %s", (run_id,))}


def finish(url, conn, run_id, name, delta=None):
    """Stand in for a worker: run the node's job in process and store its outcome."""
    job = nodes(url, run_id)[name]
    outcome = testing.run_node_row(job)
    if outcome.status == "completed":
        node_queue.mark_completed(job["id"], outcome.result.obj if delta is None else delta, conn=conn)
    else:
        node_queue.mark_failed(job["id"], outcome.error or "", conn=conn)
    DispatchDrain().drain_once(conn)
    return outcome


def test_start_run_is_atomic_with_the_callers_transaction(database_url):
    wf = Workflow("w").node("a", f"{N}:echo")
    with psycopg.connect(database_url) as caller:
        run_id = queue_workflows.start_run(wf, {"x": 1}, conn=caller)
        caller.rollback()
    assert query(database_url, "SELECT id FROM workflow_runs") == []
    assert query(database_url, "SELECT id FROM workflow_node_jobs") == []
    with psycopg.connect(database_url) as caller:
        run_id = queue_workflows.start_run(wf, {"x": 1}, conn=caller, priority=7)
    row = nodes(database_url, run_id)["a"]
    assert (row["status"], row["priority"], row["node_module"]) == ("queued", 7, f"{N}:echo")


def test_an_invalid_workflow_writes_nothing(database_url):
    with pytest.raises(WorkflowValidationError, match="depends on unknown node 'nope'"):
        queue_workflows.start_run(Workflow("w").node("a", f"{N}:echo", deps=["nope"]), {})
    assert query(database_url, "SELECT count(*) AS n FROM workflow_runs") == [{"n": 0}]


def test_a_run_walks_to_completion_with_refs_skips_and_outputs(database_url, conn):
    wf = (
        Workflow("walk")
        .node("src", f"{N}:source", inputs={"n": {"$from": "count"}})
        .node("evens", f"{N}:echo", deps=["src"],
              inputs={"items": {"$filter": {"$from": "src.items"}, "where": {"kind": "even"}}, "lit": {"$value": {"$from": "x"}}})
        .node("never", f"{N}:echo", deps=["src"], skip_if={"$ne": [{"$from": "src.items.0.kind"}, "odd"]})
        .node("after_never", f"{N}:echo", deps=["never"])
        .node("join", f"{N}:echo", deps=["evens", "after_never"], inputs={"n": {"$from": "evens.echo.items", "default": []}})
    )
    run_id = queue_workflows.start_run(wf, {"count": 3})
    status = queue_workflows.run_status(run_id)
    assert status["status"] == "running"
    assert {k: v["status"] for k, v in status["nodes"].items()} == {
        "src": "queued", "evens": "pending", "never": "pending", "after_never": "pending", "join": "pending"}
    finish(database_url, conn, run_id, "src")
    assert nodes(database_url, run_id)["never"]["status"] == "skipped"
    assert nodes(database_url, run_id)["after_never"]["status"] == "skipped"
    finish(database_url, conn, run_id, "evens")
    assert nodes(database_url, run_id)["evens"]["context_delta"]["echo"] == {
        "items": [{"i": 0, "kind": "even"}, {"i": 2, "kind": "even"}], "lit": {"$from": "x"}}
    finish(database_url, conn, run_id, "join")
    status = queue_workflows.run_status(run_id)
    assert status["status"] == "completed" and status["finished_at"] is not None
    assert status["nodes"]["join"]["output"]["echo"]["n"] == [{"i": 0, "kind": "even"}, {"i": 2, "kind": "even"}]
    assert status["nodes"]["src"]["attempts"] == 0  # run in process here, never claimed
    assert status["context"]["count"] == 3 and "items" in status["context"]


def test_late_reference_is_resolved_by_the_worker(database_url, conn):
    # 'b' reads the key 'value' of the merged outputs, which only 'a' (not a dependency) gives:
    # unresolvable at enqueue, resolved when it runs. Naming 'a' itself would be refused (not upstream).
    wf = Workflow("late").node("a", f"{N}:run", inputs={"value": 1}).node("gate", f"{N}:echo").node(
        "b", f"{N}:echo", deps=["gate"], inputs={"seen": {"$from": "value"}, "now": {"$from": "gate.echo", "default": None}})
    run_id = queue_workflows.start_run(wf, {})
    finish(database_url, conn, run_id, "gate")
    b = nodes(database_url, run_id)["b"]
    assert b["input_refs"] == {"seen": {"$from": "value"}} and b["inputs"] == {"now": {}}
    failed = testing.run_node_row(b)  # 'a' has not run yet: the node fails, naming input and path, once
    assert failed.status == "failed"
    assert (failed.error or "").endswith("Unresolved: input 'seen' of node 'b': $from 'value' has no value and no default")
    finish(database_url, conn, run_id, "a")
    assert testing.run_node_row(b).result.obj == {"echo": {"seen": 1, "now": {}}}


def test_invoke_context_finalize_applies_only_on_success(database_url, conn):
    seen = []

    @contextmanager
    def ctx(job, run):
        seen.append(("enter", job["node_name"], run["workflow_name"]))
        try:
            yield lambda delta: {**delta, "_mocked": True}
        finally:
            seen.append(("exit", job["node_name"]))

    queue_workflows.set_invoke_context(ctx)
    run_id = queue_workflows.start_run(Workflow("ctx").node("ok", f"{N}:echo").node("bad", f"{N}:boom"), {})
    ok = testing.run_node_row(nodes(database_url, run_id)["ok"])
    bad = testing.run_node_row(nodes(database_url, run_id)["bad"])
    assert ok.result.obj == {"echo": {}, "_mocked": True}
    assert bad.status == "failed" and "RuntimeError: boom" in (bad.error or "")
    assert seen == [("enter", "ok", "ctx"), ("exit", "ok"), ("enter", "bad", "ctx"), ("exit", "bad")]


def test_node_module_package_and_resolver_hooks_at_execution(database_url):
    queue_workflows.set_node_module_package("qw_dag")  # "qw_dag.qw_dag_nodes" does not exist: falls back
    run_id = queue_workflows.start_run(Workflow("pkg").node("a", f"{N}:run", inputs={"value": 3}), {})
    assert testing.run_node_row(nodes(database_url, run_id)["a"]).result.obj == {"value": 3}
    queue_workflows.set_node_resolver(lambda call: (lambda **kw: {"resolved": call, **kw}))
    assert testing.run_node_row(nodes(database_url, run_id)["a"]).result.obj == {"resolved": f"{N}:run", "value": 3}


def test_workflow_provider_by_name(database_url):
    queue_workflows.set_workflow_provider(lambda name: {"name": name, "nodes": [{"id": "a", "call": f"{N}:echo"}]} if name == "named" else None)
    run_id = queue_workflows.start_run("named", {})
    assert queue_workflows.run_status(run_id)["workflow_name"] == "named"
    with pytest.raises(LookupError, match="no workflow named 'other'"):
        queue_workflows.start_run("other", {})
    queue_workflows.set_workflow_provider(lambda name: None, lambda name: {"nodes": [{"id": "a", "module": N}]})
    assert queue_workflows.run_status(queue_workflows.start_run("schema_only", {}))["workflow_name"] == "schema_only"


def test_a_failed_node_fails_the_run_and_cancels_queued_siblings(database_url, conn):
    wf = Workflow("f").node("bad", f"{N}:boom", max_attempts=1).node("sib", f"{N}:echo").node("next", f"{N}:echo", deps=["bad", "sib"])
    run_id = queue_workflows.start_run(wf, {})
    finish(database_url, conn, run_id, "bad")
    status = queue_workflows.run_status(run_id)
    assert status["status"] == "failed" and status["error"] == "node 'bad' failed"
    assert {k: v["status"] for k, v in status["nodes"].items()} == {"bad": "failed", "sib": "cancelled", "next": "pending"}
    DispatchDrain().drain_once(conn)  # the sibling's own cancel event: the run is already over
    assert query(database_url, "SELECT count(*) AS n FROM workflow_dispatch_events WHERE processed_at IS NULL") == [{"n": 0}]
