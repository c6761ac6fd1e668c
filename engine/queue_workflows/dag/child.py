"""Child workflows: a node of kind 'workflow' starts a run of its own and completes with that run's output.

When the dispatcher reaches the node, its row is inserted `waiting` and `start` inserts the child
run in the same transaction (`parent_run_id`, `parent_node`, `depth`), its context the node's
resolved inputs; the store then enqueues the child's roots. The child's definition is the
provider's (`set_workflow_provider`) when the child starts, or the one given inline, and the child
run keeps that snapshot like any run. A child that cannot start (past `QW_MAX_WORKFLOW_DEPTH` or
`QW_MAX_CHILD_RUNS`, an unknown name, an invalid definition, an input with no value) fails its
node with the reason, and the run fails as for any failed node.

The rest is migration 0039's triggers, so that every way a run or node ends is covered in its own
transaction: the child's end ends the parent node (completed: its output is the outputs of the
child's completed sink nodes keyed by node id; failed or cancelled: the node fails with the
child's error), and a waiting node that ends otherwise (its run failed or was cancelled) cancels
its child run, which cascades down. `control.cancel_run(hard=True)` also stops the running nodes
of every run below, and `control.restart_run` restarts a failed or cancelled child in place.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import psycopg
from psycopg.types.json import Jsonb

from queue_workflows import config
from queue_workflows.common import sqlfile
from queue_workflows.dag import hooks, refs
from queue_workflows.dag.definition import Node, WorkflowValidationError
from queue_workflows.dag.validate import validate
from queue_workflows.payloads import clean_text, json_object

_CHILD = sqlfile.load("queue_workflows.dag", "child.sql")


class ChildStartError(Exception):
    """Why a child run cannot start; it becomes the parent node's error."""


def start(cur: Any, run: Mapping[str, Any], node: Node, scope: refs.Scope) -> int | None:
    """Start the child run of `node` (inserted `waiting`); its id, or None when the node failed instead
    or already has its child (a repeated dispatch)."""
    try:
        definition, context = _prepare(cur, run, node, scope)
    except psycopg.Error:
        raise
    except Exception as exc:  # noqa: BLE001 - a provider is host code: whatever it raises fails the node, named
        message = str(exc) if isinstance(exc, (ChildStartError, WorkflowValidationError)) else f"{type(exc).__name__}: {exc}"
        error = clean_text(f"child workflow of node {node.id!r} not started: {message}")[:2000]
        cur.execute(_CHILD["child_fail_node"], {"run_id": run["id"], "node_name": node.id, "error": error})
        return None
    row = cur.execute(_CHILD["child_insert_run"], {
        "workflow_name": definition["name"], "context": context, "definition": Jsonb(definition),
        "priority": run["priority"], "parent_run_id": run["id"], "parent_node": node.id, "depth": run["depth"] + 1,
        "trace_context": trace_column(run),  # the child's nodes join the parent run's trace
    }).fetchone()
    return row["id"] if row else None


def trace_column(run: Mapping[str, Any]) -> Jsonb | None:
    """The run's stored trace context (docs/tracing.md), for a row it dispatches."""
    carrier = run.get("trace_context")
    return Jsonb(carrier) if carrier else None


def _prepare(cur: Any, run: Mapping[str, Any], node: Node, scope: refs.Scope) -> tuple[dict[str, Any], Jsonb]:
    settings = config.current().settings
    depth = run["depth"] + 1
    if depth > settings.max_workflow_depth:
        raise ChildStartError(f"it would nest {depth} levels deep, past the limit of {settings.max_workflow_depth} (QW_MAX_WORKFLOW_DEPTH)")
    started = cur.execute(_CHILD["child_count_runs"], {"run_id": run["id"]}).fetchone()["n"]
    if started >= settings.max_child_runs:
        raise ChildStartError(f"run {run['id']} has started {started} child runs, the limit (QW_MAX_CHILD_RUNS)")
    inputs: dict[str, Any] = {}
    for key, expr in node.inputs.items():
        try:
            inputs[key] = hooks.resolve_ref(expr, scope)
        except refs.Unresolved as exc:  # no worker resolves it later: the child's context is written now
            raise ChildStartError(f"input {key!r}: {exc}") from None
    raw = hooks.load_definition(node.workflow) if isinstance(node.workflow, str) else node.workflow
    # Its callables were checked by name (and imported) where start_run ran; the orchestrator imports
    # no node code, and each child below is checked when it starts, so a deep chain costs O(depth).
    wf = validate(raw, check_callables=False, check_children=False)
    context = json_object(inputs, what=f"inputs of node {node.id!r}", max_bytes=settings.max_payload_bytes)
    return wf.to_dict(), context  # type: ignore[return-value]
