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


def random_dag(rng, n: int) -> Workflow:
    """A random DAG: each node depends on up to three earlier ones; some always skip."""
    wf = Workflow("random")
    for i in range(n):
        deps = sorted(rng.sample(range(i), k=min(i, rng.randint(0, 3))))
        skip = {"$eq": [1, 1]} if rng.random() < 0.15 else None
        wf.node(f"n{i}", "m", deps=[f"n{d}" for d in deps], skip_if=skip)
    return wf


def test_advance_after_decides_exactly_what_advance_decides():
    """Walk 40 random DAGs to the end, completing one queued node at a time in random order."""
    import random

    for seed in range(40):
        rng = random.Random(seed)
        wf = random_dag(rng, rng.randint(2, 25))
        skip_if = lambda node, states: True  # noqa: E731 - every node with a skip_if skips
        states: dict[str, str] = {}

        def apply(step):
            states.update({n: "queued" for n in step.enqueue})
            states.update({n: "skipped" for n in step.skip})

        apply(dispatcher.start(wf, skip_if))
        asked: list[set[str]] = []

        def states_of(names):
            asked.append(set(names))
            return {n: states[n] for n in names if n in states}

        while queued := [n for n, s in states.items() if s == "queued"]:
            done = rng.choice(queued)
            states[done] = "completed"
            full = dispatcher.advance(wf, states, skip_if)
            part = dispatcher.advance_after(wf, [done], states_of, skip_if)
            assert (sorted(part.enqueue), sorted(part.skip)) == (sorted(full.enqueue), sorted(full.skip)), f"seed {seed} after {done}"
            apply(part)
        assert dispatcher.advance(wf, states, skip_if).run_status == "completed"
        assert all(len(a) <= len(wf.nodes) for a in asked)


def test_advance_after_reads_only_the_neighbourhood():
    wf = fan(50)
    read: list[set[str]] = []
    states = {"root": "completed", **{f"w{i}": "completed" for i in range(50)}}

    def states_of(names):
        read.append(set(names))
        return {n: states[n] for n in names if n in states}

    assert dispatcher.advance_after(wf, ["w49"], states_of).enqueue == ["join"]
    assert read == [{"join", *(f"w{i}" for i in range(50))}]  # the join and its deps, not the whole run
