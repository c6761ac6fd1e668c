"""The DAG walk, pure: no database, no workers. Given a run's definition and its node states, say what happens next.

A node is *ready* when every dependency is `completed` or `skipped`. A ready node is skipped
(a `skipped` marker, never run) when its `skip_if` holds, or when it has dependencies and all of
them were skipped (skips cascade); otherwise it is enqueued. Skips are applied in the same
step, so a cascade resolves at once. A run completes when every node is completed or skipped,
and fails as soon as a node has failed for good (or was cancelled): its not-yet-started
siblings (`scheduled`/`queued`/`awaiting_input`/`waiting`) are cancelled, running ones finish and are ignored.

`advance` derives everything from the states, so applying it twice (a duplicate outbox event)
decides nothing new. `advance_after` makes the same decisions for the nodes a completion can
make ready, reading only their states: what keeps dispatch cheap on a wide run.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field

from queue_workflows.dag.definition import Node, Workflow
from queue_workflows.dag.validate import topological_order
from queue_workflows.jobrow import JobStatus

DONE = frozenset({JobStatus.COMPLETED, JobStatus.SKIPPED})
BROKEN = frozenset({JobStatus.FAILED, JobStatus.CANCELLED})
NOT_STARTED = frozenset({JobStatus.SCHEDULED, JobStatus.QUEUED, JobStatus.AWAITING_INPUT, JobStatus.WAITING})


@dataclass
class Step:
    enqueue: list[str] = field(default_factory=list)
    skip: list[str] = field(default_factory=list)
    cancel: list[str] = field(default_factory=list)
    run_status: str | None = None  # 'completed' / 'failed' when the run ends with this step
    error: str | None = None

    @property
    def empty(self) -> bool:
        return not (self.enqueue or self.skip or self.cancel or self.run_status)


def roots(workflow: Workflow) -> list[str]:
    return [n.id for n in workflow.nodes if not n.deps]


def advance(
    workflow: Workflow,
    states: Mapping[str, str],
    should_skip: Callable[[Node, Mapping[str, str]], bool] = lambda node, states: False,
    *,
    order: list[str] | None = None,
) -> Step:
    """What follows from `states` (node id -> status; absent = not created yet).

    `should_skip(node, states)` evaluates the node's `skip_if` (the store resolves references
    against the run's outputs); it is called only for a ready node that has a `skip_if`.
    """
    nodes = workflow.by_id()
    order = order or topological_order(workflow)
    broken = [n for n in order if states.get(n) in BROKEN]
    if broken:
        first = broken[0]
        cancel = [n for n in order if states.get(n) in NOT_STARTED]
        return Step(cancel=cancel, run_status="failed", error=f"node {first!r} {states[first]}")
    step = Step()
    current = dict(states)
    for node_id in order:  # topological: a skip decided here is seen by the dependants after it
        if node_id not in current:
            _decide(step, nodes[node_id], current, should_skip)
    if all(current.get(n) in DONE for n in order):
        step.run_status = "completed"
    return step


def _decide(step: Step, node: Node, states: dict[str, str], should_skip: Callable[[Node, Mapping[str, str]], bool]) -> str | None:
    """A node not created yet: once every dependency is done, skip it (cascade or `skip_if`) or
    enqueue it, in `step` and in `states`; returns which, or None while it is not ready."""
    dep_states = [states.get(d) for d in node.deps]
    if not all(s in DONE for s in dep_states):
        return None
    cascade = bool(node.deps) and all(s == JobStatus.SKIPPED for s in dep_states)
    decided = JobStatus.SKIPPED if cascade or (node.skip_if is not None and should_skip(node, states)) else JobStatus.QUEUED
    (step.skip if decided == JobStatus.SKIPPED else step.enqueue).append(node.id)
    states[node.id] = decided
    return decided


def dependants(workflow: Workflow) -> dict[str, list[str]]:
    """Node id -> the ids that depend on it, in definition order."""
    found: dict[str, list[str]] = {n.id: [] for n in workflow.nodes}
    for node in workflow.nodes:
        for dep in node.deps:
            found[dep].append(node.id)
    return found


def advance_after(
    workflow: Workflow,
    completed: Iterable[str],
    states_of: Callable[[set[str]], Mapping[str, str]],
    should_skip: Callable[[Node, Mapping[str, str]], bool] = lambda node, states: False,
    *,
    order: list[str] | None = None,
    depending: Mapping[str, list[str]] | None = None,
) -> Step:
    """`advance` restricted to what the `completed` nodes can unblock: their dependants and, through
    skips, theirs. `states_of(ids)` returns the statuses of those ids that exist. The run's own end
    is left to the caller (it needs every node's state); a failure or cancel needs `advance`.
    """
    nodes = workflow.by_id()
    rank = {n: i for i, n in enumerate(order or topological_order(workflow))}
    depending = depending if depending is not None else dependants(workflow)
    known: dict[str, str] = {}
    asked: set[str] = set()
    step = Step()
    frontier = {d for n in completed for d in depending.get(n, ())}
    while frontier:
        wanted = (frontier | {dep for c in frontier for dep in nodes[c].deps}) - asked
        known.update(states_of(wanted))
        asked |= wanted
        unblocked: set[str] = set()
        for node_id in sorted(frontier, key=rank.__getitem__):
            if node_id not in known and _decide(step, nodes[node_id], known, should_skip) == "skipped":
                unblocked.update(depending[node_id])
        frontier = unblocked - known.keys()
    return step


def start(workflow: Workflow, should_skip: Callable[[Node, Mapping[str, str]], bool] = lambda node, states: False) -> Step:
    """A new run's first step: its roots enqueued (or skipped)."""
    return advance(workflow, {}, should_skip)


def on_node_end(
    workflow: Workflow,
    states: Mapping[str, str],
    node_id: str,
    status: str,
    should_skip: Callable[[Node, Mapping[str, str]], bool] = lambda node, states: False,
) -> Step:
    """The step after `node_id` ended with `status` (completed, failed or cancelled)."""
    if node_id not in workflow.by_id():
        raise KeyError(f"workflow {workflow.name!r} has no node {node_id!r}")
    return advance(workflow, {**states, node_id: status}, should_skip)
