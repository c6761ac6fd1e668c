"""Map nodes (dynamic fan-out): run a node's callable once per item of a list produced upstream.

A map's own row is `waiting` while its items run; each item is an ordinary node row named
`map[i]` (`map_node`, `map_index`), so claims, retries, watchdogs, reclaim and gpu model routing
apply unchanged. `step` runs under the run's dispatch lock (store._advance): it measures the
list once, then keeps at most `max_parallel` items live by promoting held items and inserting the
next ones straight from the list in Postgres (`map.sql`), and ends the map: completed with
`{"items": [...]}` in item order, or failed by an item whose attempts are spent (its not-started
siblings cancelled) unless `allow_failures`. Its end writes the map row's outbox event, and the
drain dispatches its dependants as for any node.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from psycopg.types.json import Jsonb

from queue_workflows import config
from queue_workflows.common import sqlfile
from queue_workflows.dag import refs
from queue_workflows.dag.definition import Node, Workflow, WorkflowValidationError
from queue_workflows.errors import InvalidPayloadError
from queue_workflows.jobrow import JobStatus
from queue_workflows.payloads import check_json_tree, shown

_MAP = sqlfile.load("queue_workflows.dag", "map.sql")

MAX_PARALLEL = 1_000_000
INSERT_BATCH = 5_000  # items per INSERT statement when a wide window opens at once


def item_name(node_id: str, index: int) -> str:
    return f"{node_id}[{index}]"


def map_of(node_name: str) -> str | None:
    """The map an item row belongs to (`m[3]` -> `m`); None for a definition node (ids never hold '[')."""
    cut = node_name.find("[")
    return node_name[:cut] if cut > 0 else None


# -- validation ------------------------------------------------------------------------------

def check_maps(wf: Workflow) -> None:
    """Refuse a malformed map node (or a map key on another kind), naming the node and the key."""
    ancestors = _ancestors(wf)
    for node in wf.nodes:
        where = f"workflow {wf.name!r}: node {node.id!r}"
        if not node.is_map:
            given = [k for k, v, d in (("over", node.over, None), ("item_input", node.item_input, "item"),
                                       ("max_parallel", node.max_parallel, None), ("allow_failures", node.allow_failures, False)) if v != d]
            if given:
                raise WorkflowValidationError(f"{where}: {', '.join(given)} only apply to a map node (kind 'map')")
            continue
        _check_over(where, node, ancestors[node.id])
        item = node.item_input
        if not isinstance(item, str) or not item.isidentifier():
            raise WorkflowValidationError(f"{where}: item_input must be a parameter name, not {shown(item)}")
        if item in node.inputs:
            raise WorkflowValidationError(f"{where}: item_input {item!r} is also one of its inputs: each item is passed as {item!r}")
        mp = node.max_parallel
        if mp is not None and (isinstance(mp, bool) or not isinstance(mp, int) or not 1 <= mp <= MAX_PARALLEL):
            raise WorkflowValidationError(f"{where}: max_parallel must be an integer 1..{MAX_PARALLEL} or None, not {shown(mp)}")
        if not isinstance(node.allow_failures, bool):
            raise WorkflowValidationError(f"{where}: allow_failures must be true or false, not {shown(node.allow_failures)}")


def _check_over(where: str, node: Node, upstream: set[str]) -> None:
    over = node.over
    try:  # a literal list, a path or a default: Postgres stores neither NUL nor a lone surrogate
        check_json_tree(over, what=f"{where}: over", max_nodes=config.current().settings.max_payload_bytes)
    except InvalidPayloadError as exc:
        raise WorkflowValidationError(str(exc)) from None
    if isinstance(over, list):
        return
    usage = "a list, or {'$from': 'node.key'} naming a list in an upstream node's output or the run's context"
    if not isinstance(over, Mapping) or "$from" not in over or set(over) - {"$from", "default"}:
        raise WorkflowValidationError(f"{where}: over must be {usage}, not {shown(over)}")
    path = over["$from"]
    segments = path.split(".") if isinstance(path, str) else []
    if len(segments) < 2 or not all(segments):
        raise WorkflowValidationError(f"{where}: over: $from must be a dotted path to a list such as 'node.key', not {shown(path)}")
    if segments[0] != refs.CONTEXT and segments[0] not in upstream:
        raise WorkflowValidationError(
            f"{where}: over: $from {path!r} must start with 'context' or a node {node.id!r} depends on, not {segments[0]!r}")
    if "default" in over and not isinstance(over["default"], list):
        raise WorkflowValidationError(f"{where}: over: default must be a list, not {shown(over['default'])}")


def _ancestors(wf: Workflow) -> dict[str, set[str]]:
    deps = {n.id: list(n.deps) for n in wf.nodes}
    found: dict[str, set[str]] = {}

    def walk(start: str) -> set[str]:
        seen: set[str] = set()
        stack = list(deps.get(start, ()))
        while stack:
            current = stack.pop()
            if current not in seen:
                seen.add(current)
                stack.extend(deps.get(current, ()))
        return seen

    for node in wf.nodes:
        if node.is_map:
            found[node.id] = walk(node.id)
    return found


# -- dispatch ----------------------------------------------------------------------------------

def _source(run_id: int, node: Node) -> dict[str, Any]:
    """Where the map's list is, as query parameters: the list itself never passes through this process."""
    over = node.over
    if isinstance(over, list):
        return {"run_id": run_id, "literal": Jsonb(over), "source_node": None, "path": [], "default": None}
    head, *path = over["$from"].split(".")
    default = Jsonb(over["default"]) if "default" in over else None
    return {"run_id": run_id, "literal": None, "source_node": None if head == refs.CONTEXT else head, "path": path, "default": default}


def step(cur: Any, run_id: int, node: Node) -> str | None:
    """One move of a waiting map under its run's lock: 'completed' or 'failed' when the map ended now, else None."""
    parent = cur.execute(_MAP["map_parent"], {"run_id": run_id, "node": node.id}).fetchone()
    if parent is None or parent["status"] != JobStatus.WAITING:
        return None
    total = parent["map_total"]
    if total is None:
        measured = cur.execute(_MAP["map_measure"], _source(run_id, node)).fetchone()
        if measured["type"] != "array":
            what = "has no value" if measured["type"] == "missing" else f"is a JSON {measured['type']}, not a list"
            return _fail(cur, parent, f"map {node.id!r}: over {shown(node.over)} {what}")
        total = measured["total"]
        cur.execute(_MAP["map_set_total"], {"id": parent["id"], "total": total})
    key = {"run_id": run_id, "node": node.id}
    counts = cur.execute(_MAP["map_counts"], key).fetchone()
    if counts["failed"] and not node.allow_failures:
        first = cur.execute(_MAP["map_first_failure"], key).fetchone()
        error = f"map {node.id!r}: item {first['map_index']} {first['status']}: {first['error'] or 'no error recorded'}"
        cur.execute(_MAP["map_cancel_open_items"], {**key, "reason": f"cancelled: {error}"})
        return _fail(cur, parent, error)
    created, live, held = counts["created"], counts["live"], counts["held"]
    if created >= total and live == 0 and held == 0:
        cur.execute(_MAP["map_complete"], {**key, "id": parent["id"], "allow_failures": bool(node.allow_failures)})
        return JobStatus.COMPLETED
    room = total if node.max_parallel is None else node.max_parallel - live
    if room > 0 and held:
        room -= len(cur.execute(_MAP["map_promote"], {**key, "limit": room}).fetchall())
    start = created
    stop = min(total, created + max(room, 0))
    if start < stop:
        params = {**_source(run_id, node), "node": node.id, "item_input": node.item_input}
        for batch in range(start, stop, INSERT_BATCH):
            cur.execute(_MAP["map_insert_items"], {**params, "start": batch, "stop": min(stop, batch + INSERT_BATCH)})
    return None


def _fail(cur: Any, parent: Mapping[str, Any], error: str) -> str:
    cur.execute(_MAP["map_fail"], {"id": parent["id"], "error": error[:2000]})
    return JobStatus.FAILED


def stalled_runs(cur: Any, *, limit: int) -> list[dict[str, Any]]:
    """Running runs (locked, skipping busy ones) with a waiting map that no item event will move: its step's event was lost."""
    return list(cur.execute(_MAP["map_stalled_runs"], {"limit": limit}).fetchall())


def progress(cur: Any, run_id: int, totals: Mapping[str, int | None]) -> dict[str, dict[str, int]]:
    """Each map's items by state, `{"total", "done", "running", "failed", "queued"}` (queued: not started yet)."""
    rows = {r["map_node"]: r for r in cur.execute(_MAP["map_progress"], {"run_id": run_id, "nodes": list(totals)}).fetchall()}
    found = {}
    for name, total in totals.items():
        row = rows.get(name) or {"done": 0, "running": 0, "failed": 0}
        n = total or 0
        done, running, failed = int(row["done"]), int(row["running"]), int(row["failed"])
        found[name] = {"total": n, "done": done, "running": running, "failed": failed, "queued": max(0, n - done - running - failed)}
    return found
