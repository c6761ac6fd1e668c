"""DAG runs in the database: `start_run`, `run_status`, and applying a dispatcher step to a run.

Every decision comes from `dispatcher.advance` over the run's current node rows, under a lock
on the run row, so a repeated or concurrent dispatch of one run decides nothing twice; the
unique (run_id, node_name) backs that up at the row level.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable, Mapping, Sequence
from contextlib import nullcontext
from typing import Any, NamedTuple

from psycopg.rows import dict_row
from psycopg.types.json import Jsonb

from queue_workflows import config, db
from queue_workflows.common import sqlfile
from queue_workflows.dag import dispatcher, hooks, refs
from queue_workflows.dag import map as mapping
from queue_workflows.dag.definition import Workflow
from queue_workflows.dag.validate import topological_order, validate
from queue_workflows.errors import InvalidPayloadError
from queue_workflows.jobrow import JobStatus
from queue_workflows.payloads import check_id, json_object

_DAG = sqlfile.load("queue_workflows.dag", "dag.sql")

TERMINAL_RUN = frozenset({"completed", "failed", "cancelled"})


def start_run(
    workflow: Workflow | Mapping[str, Any] | str,
    context: Mapping[str, Any] | None = None,
    *,
    conn: db.Conn | None = None,
    priority: int = 0,
    check_callables: bool = True,
) -> int:
    """Validate `workflow`, insert its run and enqueue its roots, in the caller's transaction when `conn` is given.

    `workflow` is a Workflow, its data form, or a name for the provider (`set_workflow_provider`).
    Nothing is written when validation fails. Returns the run id.
    """
    if isinstance(workflow, str):
        name, workflow = workflow, hooks.load_workflow(workflow)
        if isinstance(workflow, Mapping) and "name" not in workflow:  # a pipeline schema: just the nodes
            workflow = {"name": name, **workflow}
    wf = validate(workflow, check_callables=check_callables)  # type: ignore[arg-type]
    if isinstance(priority, bool) or not isinstance(priority, int) or not -(2**31) <= priority < 2**31:
        raise InvalidPayloadError(f"priority must be a 32-bit integer, not {priority!r}")
    max_bytes = config.current().settings.max_payload_bytes
    params = {
        "workflow_name": wf.name,
        "context": json_object(dict(context or {}), what="context", max_bytes=max_bytes),
        "definition": Jsonb(wf.to_dict()),
        "priority": priority,
    }
    with db.transaction(conn) as c:
        # An autocommit connection gets a transaction of its own; otherwise the statements join
        # the caller's (implicit) transaction and commit or roll back with it.
        with c.transaction() if c.autocommit else nullcontext(), c.cursor(row_factory=dict_row) as cur:
            run_id: int = cur.execute(_DAG["dag_insert_run"], params).fetchone()["id"]  # type: ignore[index]
            advance_run(c, run_id)
    return run_id


def scope_for(run: Mapping[str, Any], wf: Workflow, rows: list[dict[str, Any]]) -> refs.Scope:
    """References see the run's context and the outputs of its completed nodes, in completion order."""
    outputs = {r["node_name"]: r["context_delta"] or {} for r in rows if r["status"] == JobStatus.COMPLETED}
    return refs.Scope(context=run["context"] or {}, outputs=outputs, node_ids=frozenset(wf.by_id()))


def advance_run(conn: db.Conn, run_id: int, completed: Sequence[str] | None = None) -> dispatcher.Step | None:
    """Lock the run, decide its next step from its node rows, and write it. None: nothing to do here.

    With `completed` (the nodes whose completion is being dispatched) only their dependants' rows
    are read; without it (a failure, a cancel, a start, a restart, a reconcile) the whole run is.
    """
    with conn.cursor(row_factory=dict_row) as cur:
        return _advance(cur, run_id, completed)


_PARSED: OrderedDict[tuple[int, Any], Parsed] = OrderedDict()
_PARSED_MAX = 64


class Parsed(NamedTuple):
    wf: Workflow
    order: list[str]
    scoped: frozenset[str]  # nodes whose inputs or skip_if read the run's scope
    depending: dict[str, list[str]]


def _parsed(cur: Any, run: Mapping[str, Any]) -> Parsed:
    """A run's definition never changes, so a wide run is read, parsed and ordered once, not per event.

    Also the nodes whose inputs or `skip_if` read the run's scope: only they make dispatch load it.
    """
    key = (run["id"], run["created_at"])
    hit = _PARSED.get(key)
    if hit is None:
        definition = cur.execute(_DAG["dag_run_definition"], {"run_id": run["id"]}).fetchone()["definition"]
        wf = Workflow.from_dict(definition)
        scoped = frozenset(n.id for n in wf.nodes if refs.from_paths(n.inputs) or refs.from_paths(n.skip_if))
        hit = _PARSED[key] = Parsed(wf, topological_order(wf), scoped, dispatcher.dependants(wf))
        while len(_PARSED) > _PARSED_MAX:
            _PARSED.popitem(last=False)
    else:
        _PARSED.move_to_end(key)
    return hit


def _advance(cur: Any, run_id: int, completed: Sequence[str] | None = None) -> dispatcher.Step | None:
    run = cur.execute(_DAG["dag_lock_run_head"], {"run_id": run_id}).fetchone()
    if run is None or not run["has_definition"] or run["status"] in TERMINAL_RUN:
        return None
    wf, order, scoped, depending = _parsed(cur, run)
    nodes = wf.by_id()
    loaded: list[refs.Scope] = []

    def scope() -> refs.Scope:
        if not loaded:
            rows = cur.execute(_DAG["dag_run_scope"], {"run_id": run_id, "names": order}).fetchall()
            loaded.append(scope_for(rows[0], wf, [r for r in rows if r["node_name"] is not None]))
        return loaded[0]

    def should_skip(node: Any, states: Mapping[str, str]) -> bool:
        try:
            return bool(refs.resolve(node.skip_if, scope() if node.id in scoped else refs.Scope()))
        except refs.Unresolved as exc:
            raise refs.Unresolved(f"node {node.id!r} skip_if: {exc.path}") from None

    stepped: dict[str, str | None] = {}  # maps whose items ended: each moves once, before the graph does
    for name in completed or ():
        parent = mapping.map_of(name)
        if parent is not None and parent not in stepped and parent in nodes and nodes[parent].is_map:
            stepped[parent] = mapping.step(cur, run_id, nodes[parent])
    if completed is not None and JobStatus.FAILED not in stepped.values():
        completed = [n for n in completed if n in nodes] + [m for m, ended in stepped.items() if ended == JobStatus.COMPLETED]
    else:
        completed = None
    if completed is None:
        states = {r["node_name"]: r["status"] for r in cur.execute(_DAG["dag_node_states"], {"run_id": run_id, "names": order}).fetchall()}
        for node_id in order:  # an item that failed for good, a restart's held items: every waiting map moves
            if nodes[node_id].is_map and node_id not in stepped and states.get(node_id) == JobStatus.WAITING:
                states[node_id] = mapping.step(cur, run_id, nodes[node_id]) or JobStatus.WAITING
        step = dispatcher.advance(wf, states, should_skip, order=order)
    elif not completed:
        return dispatcher.Step()  # only items moved: the graph did not
    else:
        def states_of(names: set[str]) -> dict[str, str]:
            rows = cur.execute(_DAG["dag_node_states"], {"run_id": run_id, "names": sorted(names)}).fetchall()
            return {r["node_name"]: r["status"] for r in rows}

        step = dispatcher.advance_after(wf, completed, states_of, should_skip, order=order, depending=depending)
        if not step.enqueue:  # only now can the run be over: count what is done, skips included
            done = cur.execute(_DAG["dag_run_done_count"], {"run_id": run_id, "names": order}).fetchone()["n"]
            if done + len(step.skip) == len(wf.nodes):
                step.run_status = "completed"
    _apply(cur, run, wf, step, lambda node_id: scope() if node_id in scoped else refs.Scope())
    return step


def _apply(cur: Any, run: Mapping[str, Any], wf: Workflow, step: dispatcher.Step, scope_of: Callable[[str], refs.Scope]) -> None:
    nodes = wf.by_id()
    params = []
    for node_id, status in [(n, JobStatus.QUEUED) for n in step.enqueue] + [(n, JobStatus.SKIPPED) for n in step.skip]:
        node = nodes[node_id]
        if status == JobStatus.QUEUED and node.is_input:
            status = JobStatus.AWAITING_INPUT  # an input step waits for submit_input, no worker claims it
        if status == JobStatus.QUEUED and node.is_map:
            status = JobStatus.WAITING  # the map's row waits for its items; only they are claimed
        inputs, late = refs.resolve_inputs(node.inputs, scope_of(node_id)) if status != JobStatus.SKIPPED else ({}, {})
        params.append({
            "run_id": run["id"], "node_name": node_id, "node_module": node.call, "queue": node.queue,
            "status": status, "priority": run["priority"], "required_model": node.model,
            "inputs": Jsonb(inputs), "input_refs": Jsonb(late), "max_attempts": node.max_attempts,
            "budget_seconds": node.budget_seconds,
        })
    if params:
        cur.executemany(_DAG["dag_insert_node"], params)
        for node_id in step.enqueue:
            if nodes[node_id].is_map:
                mapping.step(cur, run["id"], nodes[node_id])  # its end, if at once (an empty list), is an outbox event
    if step.cancel:
        reason = f"cancelled: run {run['id']} failed ({step.error})"
        cur.execute(_DAG["dag_cancel_nodes"], {"run_id": run["id"], "names": step.cancel, "reason": reason})
    if step.run_status:
        cur.execute(_DAG["dag_finish_run"], {"run_id": run["id"], "status": step.run_status, "error": step.error})


def run_status(run_id: int, *, conn: db.Conn | None = None) -> dict[str, Any]:
    """The run and every node of its definition: status ('pending' before it exists), attempts, output, error.

    A map node also has `"map": {"total", "done", "running", "failed", "queued"}`; its items are never listed as nodes.
    """
    check_id(run_id, what="run id")
    with db.transaction(conn) as c, c.cursor(row_factory=dict_row) as cur:
        run = cur.execute(_DAG["dag_get_run"], {"run_id": run_id}).fetchone()
        if run is None:
            raise LookupError(f"no workflow run {run_id}")
        wf = Workflow.from_dict(run["definition"]) if run["definition"] else Workflow(run["workflow_name"])
        rows = _node_rows(cur, run, wf)
        by_name = {r["node_name"]: r for r in rows}
        maps = {n.id: (by_name[n.id]["map_total"] if n.id in by_name else None) for n in wf.nodes if n.is_map}
        progress = mapping.progress(cur, run_id, maps) if maps else {}
    names = [n.id for n in wf.nodes] or list(by_name)
    nodes = {}
    for name in names:
        row = by_name.get(name)
        nodes[name] = {
            "status": row["status"] if row else "pending",
            "attempts": row["attempts"] if row else 0,
            "output": row["context_delta"] if row else None,
            "error": row["error"] if row else None,
            "job_id": row["id"] if row else None,
            "queue": row["queue"] if row else None,
        }
        if name in progress:
            nodes[name]["map"] = progress[name]
    info = {k: run[k] for k in ("id", "workflow_name", "status", "error", "priority", "poisoned_at", "created_at", "finished_at")}
    info["context"] = scope_for(run, wf, rows).merged()
    info["nodes"] = nodes
    return info


def _node_rows(cur: Any, run: Mapping[str, Any], wf: Workflow) -> list[dict[str, Any]]:
    """The rows of a run's definition nodes (by name when it has a definition), never a map's items."""
    if wf.nodes:
        return list(cur.execute(_DAG["dag_run_nodes_named"], {"run_id": run["id"], "names": [n.id for n in wf.nodes]}).fetchall())
    return list(cur.execute(_DAG["dag_run_nodes"], {"run_id": run["id"]}).fetchall())


def load_run_scope(run_id: int, *, url: str | None = None) -> tuple[dict[str, Any], refs.Scope]:
    """For the worker: the run row and the scope its node's late references resolve in."""
    with db.connect(autocommit=True, url=url) as c, c.cursor(row_factory=dict_row) as cur:
        run = cur.execute(_DAG["dag_get_run"], {"run_id": run_id}).fetchone()
        if run is None:
            raise LookupError(f"no workflow run {run_id}")
        wf = Workflow.from_dict(run["definition"]) if run["definition"] else Workflow(run["workflow_name"])
        rows = _node_rows(cur, run, wf)
    return run, scope_for(run, wf, rows)
