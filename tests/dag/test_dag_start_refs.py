"""A run never half-starts, its references are checked against the graph, and a host may resolve them."""

from __future__ import annotations

import psycopg
import pytest
from dag_rows import rows, run_row
from procs import query

import queue_workflows
from queue_workflows import testing
from queue_workflows.dag import Workflow, WorkflowValidationError, check_upstream_refs, refs, validate
from queue_workflows.dag.outbox import DispatchDrain

N = "qw_dag_nodes"


def count(url: str, table: str) -> int:
    return query(url, f"SELECT count(*) AS n FROM {table}")[0]["n"]


# --- start_run writes nothing on any failure --------------------------------------------------


def test_a_root_skip_if_the_context_cannot_answer_is_refused_and_the_callers_work_survives(database_url):
    wf = Workflow("w").node("a", f"{N}:echo", skip_if={"$from": "context.flag"})
    with psycopg.connect(database_url) as caller:
        kept = queue_workflows.start_run(Workflow("ok").node("x", f"{N}:echo"), {}, conn=caller)
        with pytest.raises(WorkflowValidationError) as info:
            queue_workflows.start_run(wf, {}, conn=caller)
        caller.commit()
    assert str(info.value) == ("workflow 'w': node 'a' skip_if: $from 'context.flag' has no value and no default "
                               "(a root node reads only the run context)")
    assert [r["id"] for r in query(database_url, "SELECT id FROM workflow_runs")] == [kept]
    assert list(rows(database_url, kept)) == ["x"]


def test_a_root_input_the_context_cannot_answer_is_refused_without_conn(database_url):
    wf = Workflow("w").node("a", f"{N}:echo", inputs={"u": {"$from": "url"}}).node("b", f"{N}:echo", deps=["a"])
    with pytest.raises(WorkflowValidationError, match=r"node 'a' input 'u': \$from 'url' has no value and no default"):
        queue_workflows.start_run(wf, {"uri": "typo"})
    assert count(database_url, "workflow_runs") == 0
    assert queue_workflows.start_run(wf, {"url": "x"}) > 0  # answered by the context: fine


def test_an_error_while_the_roots_are_enqueued_undoes_only_start_run(database_url):
    with psycopg.connect(database_url, autocommit=True) as admin:  # a real database error after the run row is written
        admin.execute("""CREATE FUNCTION refuse_boom() RETURNS trigger LANGUAGE plpgsql AS
                         $$ BEGIN RAISE EXCEPTION 'no boom here'; END $$""")
        admin.execute("""CREATE TRIGGER refuse_boom BEFORE INSERT ON workflow_node_jobs FOR EACH ROW
                         WHEN (NEW.node_name = 'boom') EXECUTE FUNCTION refuse_boom()""")
    with psycopg.connect(database_url) as caller:
        kept = queue_workflows.start_run(Workflow("ok").node("x", f"{N}:echo"), {}, conn=caller)
        with pytest.raises(psycopg.errors.RaiseException, match="no boom here"):
            queue_workflows.start_run(Workflow("bad").node("fine", f"{N}:echo").node("boom", f"{N}:echo"), {}, conn=caller)
        caller.commit()  # the caller's transaction is still usable: only start_run's statements were undone
    assert [(r["id"], r["status"]) for r in query(database_url, "SELECT id, status FROM workflow_runs")] == [(kept, "running")]
    assert count(database_url, "workflow_node_jobs") == 1
    with pytest.raises(psycopg.errors.RaiseException):  # on its own connection too
        queue_workflows.start_run(Workflow("bad").node("boom", f"{N}:echo"), {})
    assert count(database_url, "workflow_runs") == 1


def test_start_run_on_an_idle_caller_connection_still_leaves_the_commit_to_the_caller(database_url):
    with psycopg.connect(database_url) as caller:
        queue_workflows.start_run(Workflow("w").node("a", f"{N}:echo"), {}, conn=caller)
        caller.rollback()
    assert count(database_url, "workflow_runs") == 0


# --- references are checked against the graph -------------------------------------------------


def test_a_from_naming_a_node_that_is_not_upstream_is_refused(database_url):
    base = Workflow("w").node("a", f"{N}:echo").node("c", f"{N}:echo")
    sibling = Workflow("w", list(base.nodes)).node("b", f"{N}:echo", deps=["a"], inputs={"x": {"$from": "c.v"}})
    with pytest.raises(WorkflowValidationError) as info:
        queue_workflows.start_run(sibling, {})
    assert str(info.value) == "workflow 'w': node 'b' input 'x': $from 'c.v' names node 'c', which is not upstream of 'b' (add it to deps)"
    in_skip = Workflow("w", list(base.nodes)).node("b", f"{N}:echo", deps=["a"], skip_if={"$eq": [{"$from": "c.v", "default": 0}, 1]})
    with pytest.raises(WorkflowValidationError, match=r"node 'b' skip_if: \$from 'c.v' names node 'c'"):
        validate(in_skip)  # a default does not make it certain either: it hides a race
    downstream = Workflow("w").node("a", f"{N}:echo", inputs={"x": {"$from": "b.v"}}).node("b", f"{N}:echo", deps=["a"])
    with pytest.raises(WorkflowValidationError, match="node 'a' input 'x': .* names node 'b', which is not upstream of 'a'"):
        validate(downstream)
    nested = Workflow("w", list(base.nodes)).node("b", f"{N}:echo", deps=["a"], inputs={"x": {"k": [{"$filter": {"$from": "c.items"}}]}})
    with pytest.raises(WorkflowValidationError, match="names node 'c'"):
        validate(nested)
    assert count(database_url, "workflow_runs") == 0


def test_upstream_context_and_merged_keys_are_accepted():
    wf = (Workflow("w").node("a", f"{N}:echo").node("m", f"{N}:echo", deps=["a"])
          .node("z", f"{N}:echo", deps=["m"], inputs={"grand": {"$from": "a.echo"}, "ctx": {"$from": "context.x"},
                                                       "merged": {"$from": "anything.at.all"}},
                skip_if={"$eq": [{"$from": "m.echo"}, {}]}))
    assert validate(wf) is not None


def test_check_upstream_refs_is_reusable_for_other_keys():
    wf = Workflow("w").node("a", f"{N}:echo").node("c", f"{N}:echo").node("b", f"{N}:echo", deps=["a"])
    b = wf.by_id()["b"]
    check_upstream_refs(wf, b, {"$from": "a.list"}, "over")
    with pytest.raises(WorkflowValidationError, match=r"node 'b' over: \$from 'c.list' names node 'c', which is not upstream"):
        check_upstream_refs(wf, b, {"$from": "c.list"}, "over")


# --- one clean Unresolved message -------------------------------------------------------------


def test_unresolved_is_located_without_being_requoted_as_a_path():
    exc = refs.Unresolved("a.v").at("input 'y' of node 'b'")
    assert str(exc) == "input 'y' of node 'b': $from 'a.v' has no value and no default" and exc.path == "a.v"
    with pytest.raises(refs.Unresolved) as info:
        refs.resolve({"$filter": {"$from": "a"}}, refs.Scope(context={"a": {"not": "a list"}}))
    assert str(info.value) == "$filter source is a dict, not a list" and info.value.path == "a"


def test_an_unresolvable_skip_if_at_dispatch_names_node_and_path_once(database_url, conn):
    wf = Workflow("w").node("a", f"{N}:echo").node("b", f"{N}:echo", deps=["a"], skip_if={"$from": "a.missing"})
    run_id = queue_workflows.start_run(wf, {})
    job = rows(database_url, run_id)["a"]
    queue_workflows.node_queue.mark_completed(job["id"], testing.run_node_row(job).result.obj, conn=conn)
    DispatchDrain().drain_once(conn)
    [event] = query(database_url, "SELECT last_error FROM workflow_dispatch_events")
    assert event["last_error"] == "Unresolved: node 'b' skip_if: $from 'a.missing' has no value and no default"


# --- set_ref_resolver -----------------------------------------------------------------------


def braces(expr, scope):
    """A host's own reference syntax, "{{path}}"; anything else is left to the built-in."""
    if isinstance(expr, str) and expr.startswith("{{") and expr.endswith("}}"):
        return scope.lookup(expr[2:-2])  # raises refs.Unresolved when it is not there (yet)
    return refs.resolve(expr, scope)


def test_set_ref_resolver_is_exported_and_resolves_everywhere(database_url, conn):
    assert queue_workflows.set_ref_resolver is queue_workflows.dag.set_ref_resolver
    queue_workflows.set_ref_resolver(braces)
    wf = (Workflow("host").node("a", f"{N}:run", inputs={"value": "{{context.n}}"})
          .node("gate", f"{N}:echo", skip_if="{{context.skip_gate}}")
          .node("b", f"{N}:echo", deps=["gate"], inputs={"seen": "{{value}}", "builtin": {"$from": "context.n"}}))
    with pytest.raises(WorkflowValidationError, match="node 'gate' skip_if: \\$from 'context.skip_gate' has no value"):
        queue_workflows.start_run(wf, {"n": 7})  # the start check asks the host's resolver too
    run_id = queue_workflows.start_run(wf, {"n": 7, "skip_gate": False})
    assert rows(database_url, run_id)["a"]["inputs"] == {"value": 7}  # dispatcher side
    gate = rows(database_url, run_id)["gate"]
    queue_workflows.node_queue.mark_completed(gate["id"], {"echo": {}}, conn=conn)
    DispatchDrain().drain_once(conn)
    b = rows(database_url, run_id)["b"]
    assert b["inputs"] == {"builtin": 7} and b["input_refs"] == {"seen": "{{value}}"}  # 'a' has not run: late
    a = rows(database_url, run_id)["a"]
    queue_workflows.node_queue.mark_completed(a["id"], testing.run_node_row(a).result.obj, conn=conn)
    assert testing.run_node_row(b).result.obj == {"echo": {"seen": 7, "builtin": 7}}  # worker side
    queue_workflows.set_ref_resolver(None)  # the built-in again: the host syntax is a plain string
    again = queue_workflows.start_run(Workflow("plain").node("a", f"{N}:run", inputs={"value": "{{context.n}}"}), {"n": 7})
    assert rows(database_url, again)["a"]["inputs"] == {"value": "{{context.n}}"}
    assert run_row(database_url, again)["status"] == "running"


def test_a_skip_if_read_by_the_host_resolver_skips_at_dispatch(database_url):
    queue_workflows.set_ref_resolver(braces)
    run_id = queue_workflows.start_run(Workflow("s").node("a", f"{N}:echo", skip_if="{{context.skip}}"), {"skip": True})
    assert rows(database_url, run_id)["a"]["status"] == "skipped"
    with pytest.raises(TypeError, match="set_ref_resolver takes a function"):
        queue_workflows.set_ref_resolver("braces")  # type: ignore[arg-type]
