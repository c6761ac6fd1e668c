"""The pure DAG walk: fan-out, fan-in, skip cascades, failure cancelling siblings, idempotence."""

from __future__ import annotations

from queue_workflows import dispatcher
from queue_workflows.dag import Workflow


def fan(width: int = 3) -> Workflow:
    wf = Workflow("fan").node("root", "m")
    for i in range(width):
        wf.node(f"w{i}", "m", deps=["root"])
    return wf.node("join", "m", deps=[f"w{i}" for i in range(width)])


def test_roots_and_start():
    wf = fan()
    assert dispatcher.roots(wf) == ["root"]
    step = dispatcher.start(wf)
    assert step.enqueue == ["root"] and not step.skip and step.run_status is None


def test_fan_out_then_fan_in_waits_for_every_branch():
    wf = fan(3)
    step = dispatcher.on_node_end(wf, {"root": "running"}, "root", "completed")
    assert step.enqueue == ["w0", "w1", "w2"]
    states = {"root": "completed", "w0": "completed", "w1": "running", "w2": "queued"}
    assert dispatcher.on_node_end(wf, states, "w0", "completed").empty
    states = {"root": "completed", "w0": "completed", "w1": "completed", "w2": "running"}
    assert dispatcher.on_node_end(wf, states, "w2", "completed").enqueue == ["join"]
    done = {n.id: "completed" for n in wf.nodes}
    assert dispatcher.advance(wf, done).run_status == "completed"


def test_a_duplicate_event_decides_nothing_new():
    wf = fan(2)
    states = {"root": "completed", "w0": "queued", "w1": "queued"}
    assert dispatcher.on_node_end(wf, {"root": "running"}, "root", "completed").enqueue == ["w0", "w1"]
    assert dispatcher.advance(wf, states).empty  # the same event again, after its step was applied


def test_skip_if_and_the_cascade():
    wf = (
        Workflow("s")
        .node("a", "m")
        .node("b", "m", deps=["a"], skip_if={"$eq": [1, 1]})
        .node("c", "m", deps=["b"])  # only skipped deps: skipped too
        .node("d", "m", deps=["c"])  # and so on down the chain
        .node("e", "m", deps=["a", "b"])  # one completed dep: runs
    )
    seen = []

    def should_skip(node, states):
        seen.append(node.id)
        return node.id == "b"

    step = dispatcher.on_node_end(wf, {"a": "running"}, "a", "completed", should_skip)
    assert step.skip == ["b", "c", "d"]
    assert step.enqueue == ["e"]
    assert seen == ["b"]  # skip_if evaluated only for nodes that have one
    states = {"a": "completed", "b": "skipped", "c": "skipped", "d": "skipped", "e": "running"}
    assert dispatcher.on_node_end(wf, states, "e", "completed").run_status == "completed"


def test_a_skipped_root_cascades_and_completes_the_run():
    wf = Workflow("r").node("a", "m", skip_if=True).node("b", "m", deps=["a"])
    step = dispatcher.start(wf, lambda node, states: True)
    assert step.skip == ["a", "b"] and step.run_status == "completed"


def test_failure_fails_the_run_and_cancels_not_started_siblings():
    wf = fan(4)
    states = {"root": "completed", "w0": "running", "w1": "queued", "w2": "scheduled", "w3": "completed"}
    step = dispatcher.on_node_end(wf, states, "w0", "failed")
    assert step.run_status == "failed" and "node 'w0' failed" in (step.error or "")
    assert step.cancel == ["w1", "w2"]
    assert step.enqueue == [] and step.skip == []


def test_a_cancelled_node_fails_the_run():
    wf = fan(1)
    step = dispatcher.on_node_end(wf, {"root": "running"}, "root", "cancelled")
    assert step.run_status == "failed" and step.error == "node 'root' cancelled"


def test_wide_layers():
    wf = Workflow("wide").node("r", "m")
    for i in range(100):
        wf.node(f"x{i}", "m", deps=["r"])
    wf.node("j", "m", deps=[f"x{i}" for i in range(100)])
    assert len(dispatcher.on_node_end(wf, {}, "r", "completed").enqueue) == 100
