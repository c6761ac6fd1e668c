"""Child workflows in process: a node that starts a run of its own and ends with it (dag/child.py, migration 0039)."""

from __future__ import annotations

import psycopg
import pytest
from procs import query
from psycopg.rows import dict_row

import queue_workflows
from queue_workflows import node_queue
from queue_workflows.dag import Workflow, WorkflowValidationError, run_cancelled, set_workflow_provider
from queue_workflows.dag.outbox import DispatchDrain
from queue_workflows.ops import admin

N = "qw_dag_nodes"


def node_row(url: str, run_id: int, name: str) -> dict:
    return query(url, "SELECT * FROM workflow_node_jobs WHERE run_id = %s AND node_name = %s", (run_id, name))[0]


def drain(conn: psycopg.Connection) -> None:
    """Drain until the outbox is empty: a child's end writes its parent node's event inside a drain."""
    while DispatchDrain().drain_once(conn):
        pass


def complete(url: str, conn: psycopg.Connection, run_id: int, name: str, output: dict) -> None:
    node_queue.mark_completed(node_row(url, run_id, name)["id"], output, conn=conn)
    drain(conn)


def fail(url: str, conn: psycopg.Connection, run_id: int, name: str, error: str) -> None:
    node_queue.mark_failed(node_row(url, run_id, name)["id"], error, conn=conn)
    drain(conn)


def child_of(url: str, run_id: int, node: str) -> int:
    return query(url, "SELECT id FROM workflow_runs WHERE parent_run_id = %s AND parent_node = %s", (run_id, node))[0]["id"]


def provide(**workflows: Workflow) -> None:
    set_workflow_provider(lambda name: workflows[name].to_dict() if name in workflows else None)


SUB = Workflow("sub").node("double", f"{N}:echo", inputs={"v": {"$from": "context.v"}}, max_attempts=1)


def test_a_child_run_starts_with_the_nodes_inputs_and_its_output_feeds_the_dependant(database_url, conn):
    provide(sub=SUB)
    wf = (Workflow("parent").node("prep", f"{N}:echo")
          .child("sub", "sub", deps=["prep"], inputs={"v": {"$from": "prep.n"}})
          .node("use", f"{N}:echo", deps=["sub"], inputs={"got": {"$from": "sub.double.v"}}))
    run_id = queue_workflows.start_run(wf, {})
    complete(database_url, conn, run_id, "prep", {"n": 21})
    child = child_of(database_url, run_id, "sub")
    status = queue_workflows.run_status(run_id)
    assert status["nodes"]["sub"]["status"] == "waiting"
    assert (status["nodes"]["sub"]["child_run_id"], status["nodes"]["sub"]["child_status"]) == (child, "running")
    below = queue_workflows.run_status(child)
    assert (below["parent_run_id"], below["parent_node"], below["depth"], below["workflow_name"]) == (run_id, "sub", 1, "sub")
    assert below["context"]["v"] == 21 and below["nodes"]["double"]["status"] == "queued"  # claimable at once
    assert status["nodes"]["use"]["status"] == "pending"

    complete(database_url, conn, child, "double", {"v": 42})
    assert queue_workflows.run_status(child)["status"] == "completed"
    sub = queue_workflows.run_status(run_id)["nodes"]["sub"]
    assert (sub["status"], sub["output"], sub["child_status"]) == ("completed", {"double": {"v": 42}}, "completed")
    assert node_row(database_url, run_id, "use")["inputs"] == {"got": 42}
    complete(database_url, conn, run_id, "use", {"ok": True})
    assert queue_workflows.run_status(run_id)["status"] == "completed"
    listed = {r["id"]: r for r in admin.list_runs()}
    assert (listed[child]["parent_run_id"], listed[child]["parent_node"], listed[run_id]["parent_run_id"]) == (run_id, "sub", None)
    shown = [line for line in _runs_text() if line.split()[:1] == [str(child)]]
    assert len(shown) == 1 and f"run:{run_id} sub" in shown[0], shown


def _runs_text() -> list[str]:
    from rich.console import Console

    from qw_services.ops import runs_table

    console = Console(width=200, record=True)
    console.print(runs_table(admin.list_runs()))
    return console.export_text().splitlines()


def test_a_failed_child_fails_its_node_and_the_parent_with_the_childs_error(database_url, conn):
    provide(sub=SUB)
    wf = Workflow("parent").child("sub", "sub", inputs={"v": 1}).node("after", f"{N}:echo", deps=["sub"])
    run_id = queue_workflows.start_run(wf, {})
    child = child_of(database_url, run_id, "sub")
    fail(database_url, conn, child, "double", "RuntimeError: bad input")
    parent = queue_workflows.run_status(run_id)
    assert queue_workflows.run_status(child)["status"] == "failed"
    assert parent["status"] == "failed"
    assert parent["nodes"]["sub"]["status"] == "failed"
    assert parent["nodes"]["sub"]["error"] == f"child run {child} failed: node 'double' failed: RuntimeError: bad input"
    assert parent["nodes"]["after"]["status"] == "pending"


def test_a_parent_that_fails_elsewhere_cancels_its_running_child(database_url, conn):
    provide(sub=SUB)
    wf = Workflow("parent").child("sub", "sub", inputs={"v": 1}).node("other", f"{N}:boom", max_attempts=1)
    run_id = queue_workflows.start_run(wf, {})
    child = child_of(database_url, run_id, "sub")
    fail(database_url, conn, run_id, "other", "RuntimeError: boom")
    assert queue_workflows.run_status(run_id)["status"] == "failed"
    below = queue_workflows.run_status(child)
    assert below["status"] == "cancelled" and below["nodes"]["double"]["status"] == "cancelled"
    assert below["error"] == f"cancelled: its parent run {run_id} node sub is cancelled"


def three_levels() -> Workflow:
    leaf = Workflow("leaf").node("slow", f"{N}:work").node("quick", f"{N}:echo")
    mid = Workflow("mid").child("down", "leaf")
    provide(leaf=leaf, mid=mid)
    return Workflow("top").child("down", "mid")


@pytest.mark.parametrize("hard", [False, True])
def test_cancel_cascades_down_three_levels_in_one_transaction(database_url, hard):
    top = queue_workflows.start_run(three_levels(), {})
    mid = child_of(database_url, top, "down")
    leaf = child_of(database_url, mid, "down")
    claimed = query(database_url, "UPDATE workflow_node_jobs SET status = 'running', attempts = 1 "
                                  "WHERE run_id = %s AND node_name = 'slow' RETURNING id", (leaf,))  # a worker has it
    with psycopg.connect(database_url) as caller:
        result = queue_workflows.cancel_run(top, reason="enough", hard=hard, conn=caller)
        caller.rollback()  # nothing of it stays
    assert {r["status"] for r in query(database_url, "SELECT status FROM workflow_runs")} == {"running"}
    result = queue_workflows.cancel_run(top, reason="enough", hard=hard)
    assert result["child_runs"] == [mid, leaf] and result["cancelled"] == ["down"]
    states = {r["id"]: r["status"] for r in query(database_url, "SELECT id, status FROM workflow_runs")}
    assert states == {top: "cancelled", mid: "cancelled", leaf: "cancelled"}
    leaf_nodes = queue_workflows.run_status(leaf)["nodes"]
    assert leaf_nodes["quick"]["status"] == "cancelled"
    assert leaf_nodes["slow"]["status"] == ("cancelled" if hard else "running")  # soft: told, not stopped
    assert claimed and run_cancelled(leaf)


def test_restart_resumes_the_failed_child_in_place_keeping_its_completed_nodes(database_url, conn):
    provide(sub=Workflow("sub").node("one", f"{N}:echo").node("two", f"{N}:boom", deps=["one"], max_attempts=1))
    run_id = queue_workflows.start_run(Workflow("parent").child("sub", "sub").node("after", f"{N}:echo", deps=["sub"]), {})
    child = child_of(database_url, run_id, "sub")
    complete(database_url, conn, child, "one", {"first": 1})
    one_id = node_row(database_url, child, "one")["id"]
    fail(database_url, conn, child, "two", "RuntimeError: boom")
    assert queue_workflows.run_status(run_id)["status"] == "failed"

    result = queue_workflows.restart_run(run_id, requested_by="ann")
    assert result["child_runs"] == [child] and result["reset"] == ["sub"]
    below = queue_workflows.run_status(child)
    assert below["status"] == "running"
    assert (below["nodes"]["one"]["status"], below["nodes"]["one"]["job_id"]) == ("completed", one_id)  # kept, not rerun
    assert below["nodes"]["two"]["status"] == "queued"
    assert queue_workflows.run_status(run_id)["nodes"]["sub"]["status"] == "waiting"
    assert [(a["action"], a["requested_by"]) for a in queue_workflows.run_actions(child)] == [("restart", "ann")]

    complete(database_url, conn, child, "two", {"second": 2})
    complete(database_url, conn, run_id, "after", {})
    status = queue_workflows.run_status(run_id)
    assert status["status"] == "completed"
    assert status["nodes"]["sub"]["output"] == {"two": {"second": 2}}  # the sink's output, keyed by its id
    assert query(database_url, "SELECT count(*) AS n FROM workflow_runs") == [{"n": 2}]  # no second child


def test_a_completed_child_is_kept_by_a_restart(database_url, conn):
    provide(sub=SUB)
    wf = Workflow("parent").child("sub", "sub", inputs={"v": 3}).node("after", f"{N}:boom", deps=["sub"], max_attempts=1)
    run_id = queue_workflows.start_run(wf, {})
    child = child_of(database_url, run_id, "sub")
    complete(database_url, conn, child, "double", {"v": 6})
    fail(database_url, conn, run_id, "after", "RuntimeError: boom")
    result = queue_workflows.restart_run(run_id)
    assert result == {"run_id": run_id, "reset": ["after"], "enqueued": []}  # nothing below to restart
    assert queue_workflows.run_status(child)["status"] == "completed"


def test_depth_limit_stops_a_workflow_that_starts_itself_naming_the_setting(database_url, conn):
    queue_workflows.configure(database_url=database_url, max_workflow_depth=2)
    set_workflow_provider(lambda name: {"name": "rec", "nodes": [{"id": "again", "kind": "workflow", "workflow": "rec"}]})
    top = queue_workflows.start_run("rec", {})
    runs = query(database_url, "SELECT id, depth, status FROM workflow_runs ORDER BY id")
    assert [r["depth"] for r in runs] == [0, 1, 2]
    deepest = node_row(database_url, runs[-1]["id"], "again")
    assert deepest["status"] == "failed"
    assert deepest["error"] == "child workflow of node 'again' not started: it would nest 3 levels deep, past the limit of 2 (QW_MAX_WORKFLOW_DEPTH)"
    drain(conn)
    assert [r["status"] for r in query(database_url, "SELECT status FROM workflow_runs ORDER BY id")] == ["failed"] * 3
    assert queue_workflows.run_status(top)["nodes"]["again"]["error"] == (
        f"child run {top + 1} failed: node 'again' failed: child run {top + 2} failed: node 'again' failed: {deepest['error']}")


def test_fan_out_limit_fails_the_child_past_it_naming_the_setting(database_url, conn):
    queue_workflows.configure(database_url=database_url, max_child_runs=2)
    provide(sub=SUB)
    wf = Workflow("wide")
    for i in range(3):
        wf.child(f"c{i}", "sub", inputs={"v": i})
    run_id = queue_workflows.start_run(wf, {})
    nodes = queue_workflows.run_status(run_id)["nodes"]
    assert [nodes[f"c{i}"]["status"] for i in range(3)] == ["waiting", "waiting", "failed"]
    assert nodes["c2"]["error"] == f"child workflow of node 'c2' not started: run {run_id} has started 2 child runs, the limit (QW_MAX_CHILD_RUNS)"
    assert "child_run_id" not in nodes["c2"]
    drain(conn)
    assert {r["status"] for r in query(database_url, "SELECT status FROM workflow_runs")} == {"failed", "cancelled"}


def test_restart_starts_the_child_that_a_limit_kept_from_starting(database_url, conn):
    queue_workflows.configure(database_url=database_url, max_child_runs=1)
    provide(sub=SUB)
    run_id = queue_workflows.start_run(Workflow("two").child("c0", "sub", inputs={"v": 0}).child("c1", "sub", inputs={"v": 1}), {})
    drain(conn)
    assert queue_workflows.run_status(run_id)["status"] == "failed"
    first = child_of(database_url, run_id, "c0")  # cancelled with its failed parent
    queue_workflows.configure(database_url=database_url, max_child_runs=2)
    result = queue_workflows.restart_run(run_id)
    second = child_of(database_url, run_id, "c1")
    assert sorted(result["child_runs"]) == [first, second] and sorted(result["reset"]) == ["c0", "c1"]
    assert queue_workflows.run_status(second)["context"] == {"v": 1}
    for child in (first, second):
        complete(database_url, conn, child, "double", {"v": child})
    assert queue_workflows.run_status(run_id)["status"] == "completed"


def test_an_inline_child_definition_runs_and_is_validated_recursively(database_url, conn):
    inline = Workflow("inner").node("x", f"{N}:echo")
    run_id = queue_workflows.start_run(Workflow("outer").child("in", inline), {})
    child = child_of(database_url, run_id, "in")
    complete(database_url, conn, child, "x", {"done": True})
    assert queue_workflows.run_status(run_id)["status"] == "completed"

    bad = Workflow("inner").node("x", f"{N}:echo", deps=["nope"])
    with pytest.raises(WorkflowValidationError, match="workflow 'outer': node 'in': child workflow: workflow 'inner': node 'x' depends on unknown node 'nope'"):
        queue_workflows.start_run(Workflow("outer").child("in", bad), {})


def test_an_unknown_child_workflow_is_refused_at_start_naming_the_node_and_writes_nothing(database_url):
    provide(sub=SUB)
    with pytest.raises(WorkflowValidationError, match="workflow 'p': node 'c': child workflow 'nope' cannot be loaded: no workflow named 'nope'"):
        queue_workflows.start_run(Workflow("p").node("a", f"{N}:echo").child("c", "nope", deps=["a"]), {})
    with pytest.raises(WorkflowValidationError, match="node 'c': a child workflow node runs no code of its own"):
        queue_workflows.start_run({"name": "p", "nodes": [{"id": "c", "kind": "workflow", "workflow": "sub", "call": f"{N}:echo"}]}, {})
    with pytest.raises(WorkflowValidationError, match="node 'a': only a node of kind 'workflow' takes 'workflow'"):
        queue_workflows.start_run({"name": "p", "nodes": [{"id": "a", "call": f"{N}:echo", "workflow": "sub"}]}, {})
    with pytest.raises(WorkflowValidationError, match="node 'c': 'workflow' must be a workflow name or a definition, not 7"):
        queue_workflows.start_run({"name": "p", "nodes": [{"id": "c", "kind": "workflow", "workflow": 7}]}, {})
    assert query(database_url, "SELECT count(*) AS n FROM workflow_runs") == [{"n": 0}]


def test_a_child_that_ends_by_plain_sql_still_ends_its_parent_node(database_url, conn):
    provide(sub=SUB)
    run_id = queue_workflows.start_run(Workflow("parent").child("sub", "sub", inputs={"v": 1}), {})
    child = child_of(database_url, run_id, "sub")
    query(database_url, "UPDATE workflow_runs SET status = 'cancelled', error = 'by hand' WHERE id = %s RETURNING id", (child,))
    drain(conn)
    status = queue_workflows.run_status(run_id)
    assert status["nodes"]["sub"]["error"] == f"child run {child} cancelled: by hand"
    assert status["status"] == "failed"


def _blocked_on_a_lock(url: str) -> bool:
    return query(url, "SELECT count(*) AS n FROM pg_stat_activity WHERE datname = current_database() AND wait_event_type = 'Lock'")[0]["n"] > 0


@pytest.mark.parametrize("how", ["cancel", "sibling fails"])
def test_a_parent_ending_while_its_child_ends_never_deadlocks(database_url, conn, how):
    """The child's end locks its run, then its parent's node; the parent's end must take the child runs
    first, or each waits for the other (Postgres would abort one with a deadlock)."""
    import threading

    provide(sub=SUB)
    run_id = queue_workflows.start_run(Workflow("parent").child("sub", "sub", inputs={"v": 1}).node("other", f"{N}:boom", max_attempts=1), {})
    child = child_of(database_url, run_id, "sub")
    if how == "sibling fails":
        node_queue.mark_failed(node_row(database_url, run_id, "other")["id"], "RuntimeError: boom")  # committed: the drain below sees it
    errors: list[BaseException] = []
    with psycopg.connect(database_url) as ending:  # the child's drain, mid-transaction
        ending.execute("SELECT id FROM workflow_runs WHERE id = %s FOR NO KEY UPDATE", (child,))

        def parent_side() -> None:
            try:
                with psycopg.connect(database_url, row_factory=dict_row) as c:
                    if how == "cancel":
                        queue_workflows.cancel_run(run_id, conn=c)
                    else:
                        drain(c)
            except BaseException as exc:  # noqa: BLE001 - reported below
                errors.append(exc)

        thread = threading.Thread(target=parent_side)
        thread.start()
        from queue_workflows.testing import wait_until

        wait_until(lambda: errors or _blocked_on_a_lock(database_url), timeout=10, what="the parent's side to wait for the child's run")
        assert not errors, errors
        node_queue.mark_completed(node_row(database_url, child, "double")["id"], {"v": 2}, conn=ending)
        ending.execute("UPDATE workflow_runs SET status = 'completed', finished_at = now() WHERE id = %s", (child,))
        ending.commit()
        thread.join(timeout=30)
    assert not errors, errors
    assert queue_workflows.run_status(child)["status"] == "completed"
    sub = queue_workflows.run_status(run_id)["nodes"]["sub"]
    assert (sub["status"], sub["output"]) == ("completed", {"double": {"v": 2}})  # the child's end won the race, whole
    assert queue_workflows.run_status(run_id)["status"] in ("cancelled", "failed")


def test_a_child_whose_definition_changed_to_invalid_fails_its_node_when_reached(database_url, conn):
    provide(sub=SUB)
    run_id = queue_workflows.start_run(Workflow("parent").node("a", f"{N}:echo").child("sub", "sub", deps=["a"]), {})
    provide(sub=Workflow("sub").node("x", f"{N}:echo", deps=["y"]))  # redeployed between the start and the node
    complete(database_url, conn, run_id, "a", {})
    status = queue_workflows.run_status(run_id)
    assert status["nodes"]["sub"]["error"] == "child workflow of node 'sub' not started: workflow 'sub': node 'x' depends on unknown node 'y'"
    assert status["status"] == "failed"

    provide(sub=SUB)
    run_id = queue_workflows.start_run(Workflow("parent").node("a", f"{N}:echo").child("sub", "sub", deps=["a"]), {})
    set_workflow_provider(None)  # an orchestrator without the application's provider
    complete(database_url, conn, run_id, "a", {})
    assert queue_workflows.run_status(run_id)["nodes"]["sub"]["error"] == (
        "child workflow of node 'sub' not started: LookupError: no workflow named 'sub': call set_workflow_provider(load_workflow) first")


def test_a_skipped_child_node_starts_no_run_and_its_dependants_cascade(database_url, conn):
    provide(sub=SUB)
    wf = (Workflow("parent").node("a", f"{N}:echo")
          .child("sub", "sub", deps=["a"], skip_if={"$eq": [{"$from": "a.go"}, False]})
          .node("after", f"{N}:echo", deps=["sub"]))
    run_id = queue_workflows.start_run(wf, {})
    complete(database_url, conn, run_id, "a", {"go": False})
    status = queue_workflows.run_status(run_id)
    assert (status["status"], status["nodes"]["sub"]["status"], status["nodes"]["after"]["status"]) == ("completed", "skipped", "skipped")
    assert query(database_url, "SELECT count(*) AS n FROM workflow_runs") == [{"n": 1}]
