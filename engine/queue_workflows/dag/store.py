"""DAG runs in the database: `start_run`, `run_status`, and applying a dispatcher step to a run.

Every decision comes from `dispatcher.advance` over the run's current node rows, under a lock
on the run row, so a repeated or concurrent dispatch of one run decides nothing twice; the
unique (run_id, node_name) backs that up at the row level.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager, nullcontext, suppress
from typing import Any, NamedTuple

import psycopg
from psycopg.rows import dict_row
from psycopg.types.json import Jsonb

from queue_workflows import config, db
from queue_workflows.common import sqlfile, tracing
from queue_workflows.dag import child, dispatcher, hooks, refs, timers
from queue_workflows.dag import map as mapping
from queue_workflows.dag.definition import Workflow, WorkflowValidationError
from queue_workflows.dag.validate import check_start_refs, node_policy, topological_order, validate
from queue_workflows.errors import InvalidPayloadError
from queue_workflows.fair.tenants import DEFAULT_TENANT, check_tenant
from queue_workflows.jobrow import JobStatus
from queue_workflows.payloads import check_id, clean_text, json_object

_DAG = sqlfile.load("queue_workflows.dag", "dag.sql")
_CHILD = sqlfile.load("queue_workflows.dag", "child.sql")

TERMINAL_RUN = frozenset({"completed", "failed", "cancelled"})


def start_run(
    workflow: Workflow | Mapping[str, Any] | str,
    context: Mapping[str, Any] | None = None,
    *,
    conn: db.Conn | None = None,
    priority: int = 0,
    check_callables: bool = True,
    tenant: str = DEFAULT_TENANT,
) -> int:
    """Validate `workflow`, insert its run and enqueue its roots, in the caller's transaction when `conn` is given.

    `workflow` is a Workflow, its data form, or a name for the provider (`set_workflow_provider`).
    Nothing is written on any failure (validation, a root's reference the context cannot answer,
    an error while enqueueing the roots); with `conn`, the caller's earlier statements survive it.
    Returns the run id. The run's nodes, and its child runs, are `tenant`'s (docs/flow_control.md).
    """
    if isinstance(workflow, str):
        workflow = hooks.load_definition(workflow)
    wf = validate(workflow, check_callables=check_callables)  # type: ignore[arg-type]
    if isinstance(priority, bool) or not isinstance(priority, int) or not -(2**31) <= priority < 2**31:
        raise InvalidPayloadError(f"priority must be a 32-bit integer, not {priority!r}")
    max_bytes = config.current().settings.max_payload_bytes
    params = {
        "workflow_name": wf.name,
        "context": json_object(dict(context or {}), what="context", max_bytes=max_bytes),
        "definition": Jsonb(wf.to_dict()),
        "priority": priority,
        "tenant": check_tenant(tenant),
    }
    check_start_refs(wf, dict(context or {}))
    with tracing.enqueue_span("run", "dag", wf.name) as span, db.transaction(conn) as c, \
            all_or_nothing(c) if conn is not None else nullcontext(), c.cursor(row_factory=dict_row) as cur:
        # a pooled connection of our own commits on exit and rolls back on any error: no savepoint needed
        run_id: int = cur.execute(_DAG["dag_insert_run"], {**params, "trace_context": span.column}).fetchone()["id"]  # type: ignore[index]
        advance_run(c, run_id)
    return run_id


@contextmanager
def all_or_nothing(c: db.Conn) -> Iterator[None]:
    """A transaction of its own on an autocommit connection; else a savepoint in the caller's
    transaction, so a failure undoes only this call's statements and the caller's earlier ones survive."""
    if c.autocommit:
        with c.transaction():
            yield
        return
    c.execute("SAVEPOINT qw_start_run")  # not c.transaction(): on an idle connection that would COMMIT at its end
    try:
        yield
    except BaseException:
        with suppress(psycopg.Error):  # a broken connection: the caller's transaction is lost anyway
            c.execute("ROLLBACK TO SAVEPOINT qw_start_run")
            c.execute("RELEASE SAVEPOINT qw_start_run")
        raise
    c.execute("RELEASE SAVEPOINT qw_start_run")


def start_queued_run(conn: db.Conn, run_id: int) -> dispatcher.Step | None:
    """Start a run inserted as 'queued' by plain SQL, as `start_run` would: its definition and root
    references checked (by name only: the orchestrator need not have the nodes' code), then running
    with its roots enqueued; an invalid one is failed with the validation error. None: not queued."""
    with conn.cursor(row_factory=dict_row) as cur:
        run = cur.execute(_DAG["dag_lock_run"], {"run_id": run_id}).fetchone()
        if run is None or run["status"] != "queued" or run["definition"] is None:
            return None
        try:
            wf = validate(run["definition"], check_callables=False)
            check_start_refs(wf, run["context"] or {})
        except WorkflowValidationError as exc:
            error = clean_text(f"invalid definition: {exc}")[:2000]
            cur.execute(_DAG["dag_finish_run"], {"run_id": run_id, "status": "failed", "error": error})
            return dispatcher.Step(run_status="failed", error=error)
        cur.execute(_DAG["dag_start_queued_run"], {"run_id": run_id})
        return advance_run(conn, run_id)


def scope_for(run: Mapping[str, Any], wf: Workflow, rows: list[dict[str, Any]]) -> refs.Scope:
    """References see the run's context and the outputs of its completed nodes, in completion order."""
    outputs = {r["node_name"]: r["context_delta"] or {} for r in rows if r["status"] == JobStatus.COMPLETED}
    return refs.Scope(context=run["context"] or {}, outputs=outputs, node_ids=frozenset(wf.by_id()))


def read_scope(cur: Any, run_id: int, wf: Workflow) -> refs.Scope:
    """The run's scope as its (dict-row) cursor's transaction sees it."""
    rows = cur.execute(_DAG["dag_run_scope"], {"run_id": run_id, "names": [n.id for n in wf.nodes]}).fetchall()
    return scope_for(rows[0], wf, [r for r in rows if r["node_name"] is not None])


def advance_run(conn: db.Conn, run_id: int, completed: Sequence[str] | None = None) -> dispatcher.Step | None:
    """Lock the run, decide its next step from its node rows, and write it. None: nothing to do here.

    With `completed` (the nodes whose completion is being dispatched) only their dependants' rows
    are read; without it (a failure, a cancel, a start, a restart, a reconcile) the whole run is.
    Child runs the step starts are advanced in the same transaction, from a work list rather than
    by recursion, so a deep chain of children starts without a deep stack.
    """
    with conn.cursor(row_factory=dict_row) as cur:
        started: list[int] = []
        step = _advance(cur, run_id, completed, started)
        while started:
            _advance(cur, started.pop(), None, started)
        return step


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
        scoped = frozenset(n.id for n in wf.nodes if refs.from_paths(n.inputs) or refs.from_paths(n.skip_if) or timers.scoped(n))
        hit = _PARSED[key] = Parsed(wf, topological_order(wf), scoped, dispatcher.dependants(wf))
        while len(_PARSED) > _PARSED_MAX:
            _PARSED.popitem(last=False)
    else:
        _PARSED.move_to_end(key)
    return hit


def start_children(conn: db.Conn, run_id: int, names: Sequence[str]) -> list[int]:
    """Start the child runs of these `waiting` nodes (a restart's reset child nodes that never had one), then advance them."""
    with conn.cursor(row_factory=dict_row) as cur:
        run = cur.execute(_DAG["dag_lock_run_head"], {"run_id": run_id}).fetchone()
        if run is None:
            raise LookupError(f"no workflow run {run_id}")
        wf = _parsed(cur, run).wf
        scope = read_scope(cur, run_id, wf)
        started = [c for name in names if (c := child.start(cur, run, wf.by_id()[name], scope)) is not None]
        pending = list(started)
        while pending:
            _advance(cur, pending.pop(), None, pending)
    return started


def _advance(cur: Any, run_id: int, completed: Sequence[str] | None, started: list[int]) -> dispatcher.Step | None:
    run = cur.execute(_DAG["dag_lock_run_head"], {"run_id": run_id}).fetchone()
    if run is None or not run["has_definition"] or run["status"] in TERMINAL_RUN:
        return None
    wf, order, scoped, depending = _parsed(cur, run)
    nodes = wf.by_id()
    loaded: list[refs.Scope] = []

    def scope() -> refs.Scope:
        if not loaded:
            loaded.append(read_scope(cur, run_id, wf))
        return loaded[0]

    def scope_of(node_id: str) -> refs.Scope:
        # a host resolver may read the scope through syntax other than `$from`
        return scope() if node_id in scoped or hooks.ref_resolver() is not None else refs.Scope()

    def should_skip(node: Any, states: Mapping[str, str]) -> bool:
        if node.skip_if is None:
            return False
        try:
            return bool(hooks.resolve_ref(node.skip_if, scope_of(node.id)))
        except refs.Unresolved as exc:
            raise exc.at(f"node {node.id!r} skip_if") from None

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
    _apply(cur, run, wf, step, scope_of, started)
    return step


def _apply(cur: Any, run: Mapping[str, Any], wf: Workflow, step: dispatcher.Step, scope_of: Callable[[str], refs.Scope],
           started: list[int]) -> None:
    nodes = wf.by_id()
    params = []
    held = []
    trace = child.trace_column(run)  # the run's nodes share its trace
    for node_id, status in [(n, JobStatus.QUEUED) for n in step.enqueue] + [(n, JobStatus.SKIPPED) for n in step.skip]:
        node = nodes[node_id]
        if status == JobStatus.QUEUED and node.is_timer:  # a sleep or an event wait: 'waiting', the timekeeper's
            held.append(timers.row(run, node, scope_of(node_id)))
            continue
        if status == JobStatus.QUEUED and node.is_input:
            status = JobStatus.AWAITING_INPUT  # an input step waits for submit_input, no worker claims it
        elif status == JobStatus.QUEUED and node.is_child:
            status = JobStatus.WAITING  # the orchestrator holds it until its child run ends (dag/child.py)
        elif status == JobStatus.QUEUED and node.is_map:
            status = JobStatus.WAITING  # the map's row waits for its items; only they are claimed
        inputs, late = refs.resolve_inputs(node.inputs, scope_of(node_id), hooks.resolve_ref) if status != JobStatus.SKIPPED else ({}, {})
        params.append({
            "run_id": run["id"], "node_name": node_id, "node_module": node.call, "queue": node.queue,
            "status": status, "priority": run["priority"], "required_model": node.model,
            "inputs": Jsonb(inputs), "input_refs": Jsonb(late), "max_attempts": node.max_attempts,
            "budget_seconds": node.budget_seconds, "retry_policy": _policy(node), "concurrency_key": node.concurrency_key,
            "gpus": node.gpus, "vram_gb": node.vram_gb, "trace_context": trace,
        })
    if params:
        cur.executemany(_DAG["dag_insert_node"], params)
    if held:
        timers.insert_waiting(cur, held)
    for node_id in step.enqueue:
        if nodes[node_id].is_child and (child_id := child.start(cur, run, nodes[node_id], scope_of(node_id))) is not None:
            started.append(child_id)
        elif nodes[node_id].is_map:
            mapping.step(cur, run["id"], nodes[node_id])  # its end, if at once (an empty list), is an outbox event
    if step.cancel:
        cur.execute(_CHILD["child_lock_descendants"], {"run_id": run["id"]})  # before the cascade: see the query
        reason = f"cancelled: run {run['id']} failed ({step.error})"
        cur.execute(_DAG["dag_cancel_nodes"], {"run_id": run["id"], "names": step.cancel, "reason": reason})
    if step.run_status:
        cur.execute(_DAG["dag_finish_run"], {"run_id": run["id"], "status": step.run_status, "error": step.error})


def _policy(node: Any) -> Jsonb | None:
    """The node's timeout and retry policy for its row (migration 0040), so its worker needs no other read."""
    policy = node_policy(f"node {node.id!r}", node)
    return Jsonb(policy) if policy is not None else None


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
        children = {r["parent_node"]: r for r in cur.execute(_CHILD["child_runs_of"], {"run_id": run_id}).fetchall()}
    kinds = {n.id: n.kind for n in wf.nodes}
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
        if name in children:  # a child workflow node: the run it started
            nodes[name].update(child_run_id=children[name]["id"], child_status=children[name]["status"])
        if name in progress:
            nodes[name]["map"] = progress[name]
        nodes[name].update(timers.status_fields(kinds.get(name), row))
    info = {k: run[k] for k in ("id", "workflow_name", "status", "error", "priority", "poisoned_at", "created_at", "finished_at",
                                "parent_run_id", "parent_node", "depth")}
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
