"""DAG definitions: the builder and the data form agree, and every validation error names its culprit."""

from __future__ import annotations

import json

import pytest
import qw_dag_nodes

from queue_workflows.dag import Workflow, WorkflowValidationError, set_node_module_package, set_node_resolver, validate

N = "qw_dag_nodes"


def diamond() -> Workflow:
    return (
        Workflow("diamond")
        .node("a", f"{N}:source")
        .node("b", qw_dag_nodes.work, deps=["a"], inputs={"item": {"$from": "a.items.0"}})
        .node("c", f"{N}:work", deps=["a"], skip_if={"$eq": [{"$from": "a.pid"}, 0]})
        .node("d", f"{N}:join", deps=["b", "c"], max_attempts=5, budget_seconds=30)
    )


def test_builder_and_data_form_are_the_same_shape(tmp_path):
    wf = diamond()
    data = wf.to_dict()
    assert data["nodes"][1]["call"] == "qw_dag_nodes:work"  # a function becomes its import string
    assert Workflow.from_dict(data).to_dict() == data
    (tmp_path / "wf.json").write_text(json.dumps(data))
    assert Workflow.load(tmp_path / "wf.json").to_dict() == data
    yaml = pytest.importorskip("yaml")
    (tmp_path / "wf.yaml").write_text(yaml.safe_dump(data))
    assert Workflow.load(tmp_path / "wf.yaml").to_dict() == data
    assert validate(data).name == "diamond"


def test_a_module_exposing_run_is_a_valid_call():
    validate(Workflow("m").node("only", N))
    validate({"name": "m", "nodes": [{"id": "only", "module": N}]})  # the seed's node_module spelling


def bad(**node):
    base = {"id": "x", "call": f"{N}:work"}
    return {"name": "w", "nodes": [{**base, **node}]}


@pytest.mark.parametrize(
    "workflow, message",
    [
        (
            {"name": "w", "nodes": [{"id": "a", "call": f"{N}:work", "deps": ["c"]},
                                    {"id": "b", "call": f"{N}:work", "deps": ["a"]},
                                    {"id": "c", "call": f"{N}:work", "deps": ["b"]}]},
            "workflow 'w': cycle: a -> b -> c -> a",
        ),
        (bad(deps=["x"]), "cycle: x -> x"),
        (bad(deps=["ghost"]), "node 'x' depends on unknown node 'ghost'"),
        ({"name": "w", "nodes": [{"id": "x", "call": f"{N}:work"}, {"id": "x", "call": f"{N}:join"}]}, "duplicate node id 'x'"),
        (bad(queue="gpu"), "node 'x': a gpu node needs a model"),
        (bad(queue="cpu", model="bge"), "node 'x': a cpu node cannot require a model (got 'bge')"),
        (bad(queue="tpu"), "node 'x': queue must be 'cpu' or 'gpu', not 'tpu'"),
        (bad(call="qw_dag_nodes:nope"), "node 'x': unresolvable callable: 'qw_dag_nodes:nope' names nothing callable"),
        (bad(call="qw_demo.no_such_module_xyz:run"), "node 'x': unresolvable callable: cannot import 'qw_demo.no_such_module_xyz:run'"),
        (bad(call="no_such_module_xyz:run"), "node 'x': node callable 'no_such_module_xyz:run' is not allowed: module 'no_such_module_xyz' is not under"),
        (bad(call="not a path"), "node 'x': 'call' must be 'pkg.module' or 'pkg.module:function'"),
        (bad(inputs={"v": {"$form": "a.b"}}), "node 'x': input 'v': malformed reference: unknown operator '$form'"),
        (bad(inputs={"v": {"$from": "a..b"}}), "node 'x': input 'v': malformed reference: $from needs a dotted path"),
        (bad(inputs={"v": {"$from": "a", "fallback": 1}}), "input 'v': malformed reference: $from does not take 'fallback'"),
        (bad(skip_if={"$eq": [1]}), "node 'x': skip_if: malformed reference: $eq takes a list of two operands"),
        (bad(inputs={"v": [{"k": {"$nope": 1}}]}), "input 'v'[0].k: malformed reference: unknown operator '$nope'"),
        (bad(max_attempts=0), "node 'x': max_attempts must be an integer 1..1000, not 0"),
        (bad(budget_seconds=-1), "node 'x': budget_seconds must be a positive number, not -1"),
        (bad(id="bad id"), "node id 'bad id' is invalid"),
        (bad(colour="red"), "node 'x' has unknown key(s) colour"),
        ({"name": "w", "nodes": []}, "workflow 'w' has no nodes"),
    ],
)
def test_validation_errors_name_the_culprit(workflow, message):
    with pytest.raises(WorkflowValidationError) as info:
        validate(workflow)
    assert message in str(info.value)


def test_a_lambda_is_refused_as_unresolvable():
    with pytest.raises(WorkflowValidationError, match="node 'x': unresolvable callable .*<lambda>"):
        validate(Workflow("w").node("x", lambda: {}))


def test_node_module_package_and_node_resolver_hooks():
    set_node_module_package("tests_pkg_missing")
    validate(Workflow("w").node("x", f"{N}:work"))  # falls back to the name as written
    set_node_resolver(lambda call: qw_dag_nodes.echo if call == "anything" else None)
    validate(Workflow("w").node("x", "anything"))
    with pytest.raises(WorkflowValidationError, match="node 'y': unresolvable callable: 'other' names nothing callable"):
        validate(Workflow("w").node("y", "other"))
