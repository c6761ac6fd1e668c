"""Validate a workflow before anything is written; every error names its culprit."""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from typing import Any

from queue_workflows import config
from queue_workflows.common import retry_policy
from queue_workflows.dag import map as mapping
from queue_workflows.dag import refs, timers
from queue_workflows.dag.definition import KINDS, POLICY_KEYS, Node, Workflow, WorkflowValidationError, as_workflow, check_workflow_name
from queue_workflows.dag.hooks import UnresolvableCallableError, check_allowed_calls, load_definition, resolve_callable, resolve_ref
from queue_workflows.errors import InvalidPayloadError
from queue_workflows.payloads import check_gpus, check_json_tree, check_vram_gb, shown

_ID_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_-]{0,127}$")
QUEUES = ("cpu", "gpu")
RESERVED_IDS = frozenset({refs.CONTEXT})  # a `$from` path's first segment: a node by this name would be unreachable


def validate(workflow: Workflow | Mapping[str, Any], *, check_callables: bool = True, check_children: bool = True,
             _seen: frozenset[str] = frozenset()) -> Workflow:
    """The workflow, checked: ids, queues/models, deps, cycles, references, callables (importable), child workflows.

    `check_children=False` leaves the child workflows' own definitions unread (each is checked when its run starts).
    """
    wf = as_workflow(workflow)
    check_workflow_name(wf.name)
    name = wf.name
    if not wf.nodes:
        raise WorkflowValidationError(f"workflow {name!r} has no nodes")
    seen: set[str] = set()
    for node in wf.nodes:
        _check_node(name, node)
        if node.id in seen:
            raise WorkflowValidationError(f"workflow {name!r}: duplicate node id {node.id!r}")
        seen.add(node.id)
    for node in wf.nodes:
        for dep in node.deps:
            if dep not in seen:
                raise WorkflowValidationError(f"workflow {name!r}: node {node.id!r} depends on unknown node {dep!r}")
            if dep == node.id:
                raise WorkflowValidationError(f"workflow {name!r}: cycle: {node.id} -> {node.id}")
    cycle = find_cycle(wf)
    if cycle:
        raise WorkflowValidationError(f"workflow {name!r}: cycle: {' -> '.join(cycle)}")
    graph = {n.id: n.deps for n in wf.nodes}
    for node in wf.nodes:
        _check_refs(name, node)
        for key, expr in node.inputs.items():
            check_upstream_refs(wf, node, expr, f"input {key!r}", graph=graph)
        check_upstream_refs(wf, node, node.skip_if, "skip_if", graph=graph)
        for key in timers.REFERENCED:  # a sleep's or event wait's own keys read the graph as inputs do
            check_upstream_refs(wf, node, (node.timer or {}).get(key), repr(key), graph=graph)
    mapping.check_maps(wf)

    check_allowed_calls(wf)  # by name, even unchecked: no process may enqueue code a worker may not run
    if check_callables:

        for node in wf.nodes:
            if not node.runs_code:
                continue
            try:
                resolve_callable(node.call)
            except UnresolvableCallableError as exc:
                raise WorkflowValidationError(f"workflow {name!r}: node {node.id!r}: unresolvable callable: {exc}") from None
            except Exception as exc:  # noqa: BLE001 - importing host code may raise anything
                raise WorkflowValidationError(
                    f"workflow {name!r}: node {node.id!r}: unresolvable callable {node.call!r}: {type(exc).__name__}: {exc}"
                ) from None
    if check_children:
        _check_children(wf, check_callables, _seen | {name})
    return wf


def _check_children(wf: Workflow, check_callables: bool, seen: frozenset[str]) -> None:
    """Each child workflow validated like its parent; a name already on the path is not loaded again,
    so a workflow may start itself (QW_MAX_WORKFLOW_DEPTH stops it at run time)."""
    for node in wf.nodes:
        if not node.is_child or (isinstance(node.workflow, str) and node.workflow in seen):
            continue
        where = f"workflow {wf.name!r}: node {node.id!r}"
        if isinstance(node.workflow, str):
            try:
                definition = load_definition(node.workflow)
            except Exception as exc:  # noqa: BLE001 - the provider is host code
                raise WorkflowValidationError(f"{where}: child workflow {node.workflow!r} cannot be loaded: {exc}") from None
        else:
            definition = node.workflow
        try:
            validate(definition, check_callables=check_callables, _seen=seen)
        except WorkflowValidationError as exc:
            raise WorkflowValidationError(f"{where}: child workflow: {exc}") from None


def _check_node(name: str, node: Node) -> None:
    if not isinstance(node.id, str) or not _ID_RE.match(node.id):
        raise WorkflowValidationError(f"workflow {name!r}: node id {shown(node.id)} is invalid (letters, digits, _ and -, max 128)")
    where = f"workflow {name!r}: node {node.id!r}"
    if node.id in RESERVED_IDS:
        raise WorkflowValidationError(f"{where}: the id {node.id!r} is reserved: {{'$from': '{node.id}.x'}} reads the run's context")
    if node.kind not in KINDS:
        raise WorkflowValidationError(f"{where}: kind must be one of {', '.join(map(repr, KINDS))}, not {node.kind!r}")
    if node.is_child:
        _check_child_node(where, node)
    elif node.workflow is not None:
        raise WorkflowValidationError(f"{where}: only a node of kind 'workflow' takes 'workflow'")
    timers.check_node(where, node)  # a sleep / wait_event: no call, queue or model, its own keys
    if node.is_input:
        if node.call is not None:
            raise WorkflowValidationError(f"{where}: an input step runs nothing: give it no 'call' (got {node.call!r})")
        if node.queue != "cpu" or node.model is not None:
            raise WorkflowValidationError(f"{where}: an input step takes no queue or model (it is answered by submit_input)")
    elif not node.is_timer and isinstance(node.call, str) and ("<locals>" in node.call or "<lambda>" in node.call):
        raise WorkflowValidationError(f"{where}: unresolvable callable {node.call!r} (a nested function or lambda cannot be imported)")
    if node.runs_code and (not isinstance(node.call, str) or not re.match(r"^[A-Za-z_][\w.]*(:[A-Za-z_][\w.]*)?$", node.call)):
        raise WorkflowValidationError(f"{where}: 'call' must be 'pkg.module' or 'pkg.module:function', not {node.call!r}")
    if node.queue not in QUEUES:
        raise WorkflowValidationError(f"{where}: queue must be 'cpu' or 'gpu', not {node.queue!r}")
    if node.queue == "gpu" and not (isinstance(node.model, str) and node.model):
        raise WorkflowValidationError(f"{where}: a gpu node needs a model (model=...)")
    if node.queue == "cpu" and node.model is not None:
        raise WorkflowValidationError(f"{where}: a cpu node cannot require a model (got {node.model!r}); use queue='gpu'")
    if node.gpus != 1 or node.vram_gb is not None:
        _check_gpu_sizes(where, node)
    if not all(isinstance(d, str) for d in node.deps):
        raise WorkflowValidationError(f"{where}: deps must be node ids, not {list(node.deps)!r}")
    if len(set(node.deps)) != len(node.deps):
        raise WorkflowValidationError(f"{where}: a dependency is listed twice in {list(node.deps)!r}")
    if not isinstance(node.inputs, Mapping) or not all(isinstance(k, str) and k.isidentifier() for k in node.inputs):
        raise WorkflowValidationError(f"{where}: inputs must map parameter names to values or references")
    ma = node.max_attempts
    if isinstance(ma, bool) or not isinstance(ma, int) or not 1 <= ma <= 1000:
        raise WorkflowValidationError(f"{where}: max_attempts must be an integer 1..1000, not {ma!r}")
    b = node.budget_seconds
    if b is not None and (isinstance(b, bool) or not isinstance(b, (int, float)) or not math.isfinite(b) or b <= 0):
        raise WorkflowValidationError(f"{where}: budget_seconds must be a positive number, not {b!r}")
    ck = node.concurrency_key
    if ck is not None and (not node.runs_code or not isinstance(ck, str) or not 1 <= len(ck) <= 200 or "\x00" in ck):
        raise WorkflowValidationError(f"{where}: concurrency_key must be a string of 1 to 200 characters on a node that runs code, not {ck!r}")
    node_policy(where, node)


def node_policy(where: str, node: Node) -> dict[str, Any] | None:
    """The node's timeout and retry policy as its row stores it; refused naming the node and the key."""
    given = [key for key in POLICY_KEYS if getattr(node, key) is not None]
    if given and not node.runs_code:
        raise WorkflowValidationError(f"{where}: a node of kind {node.kind!r} runs no code of its own: it takes no {', '.join(given)}")
    if node.timeout is not None and node.budget_seconds is not None:
        raise WorkflowValidationError(f"{where}: give timeout (a failed attempt, retried by its policy) or budget_seconds "
                                      "(the watchdog's uncharged requeue), not both")
    try:
        return retry_policy.build(**{key: getattr(node, key) for key in POLICY_KEYS})
    except retry_policy.PolicyError as exc:
        raise WorkflowValidationError(f"{where}: {exc}") from None


def _check_child_node(where: str, node: Node) -> None:
    if node.call is not None:
        raise WorkflowValidationError(f"{where}: a child workflow node runs no code of its own: give it no 'call' (got {node.call!r})")
    if node.queue != "cpu" or node.model is not None:
        raise WorkflowValidationError(f"{where}: a child workflow node takes no queue or model (its child's nodes say theirs)")
    if isinstance(node.workflow, str):
        try:
            check_workflow_name(node.workflow)
        except WorkflowValidationError as exc:
            raise WorkflowValidationError(f"{where}: 'workflow' {exc.args[0].removeprefix('workflow: ')}") from None
    elif not isinstance(node.workflow, Mapping):
        raise WorkflowValidationError(f"{where}: 'workflow' must be a workflow name or a definition, not {shown(node.workflow)}")


def _check_refs(name: str, node: Node) -> None:
    where = f"workflow {name!r}: node {node.id!r}"
    try:  # first, iteratively: the reference walk below recurses, and Postgres refuses NUL and lone surrogates
        check_json_tree({"inputs": node.inputs, "skip_if": node.skip_if}, what=where, max_nodes=config.current().settings.max_payload_bytes)
    except InvalidPayloadError as exc:
        raise WorkflowValidationError(str(exc)) from None
    try:
        for key, expr in node.inputs.items():
            refs.check(expr, f"{where}: input {key!r}")
        if node.skip_if is not None:
            refs.check(node.skip_if, f"{where}: skip_if")
    except refs.MalformedReferenceError as exc:
        raise WorkflowValidationError(str(exc)) from None


def check_upstream_refs(wf: Workflow, node: Node, expr: Any, where: str, *, graph: Mapping[str, Any] | None = None) -> None:
    """Refuse a `$from` in `expr` (node `node`'s key `where`) whose first segment names a node that is not upstream of it.

    Only an upstream node's output is certain to exist when `node` runs; any other would resolve
    or not depending on timing. Call it once deps are known to be acyclic; `graph` (node id ->
    deps) saves rebuilding it per call.
    """
    for path in refs.from_paths(expr):
        head = path.split(".", 1)[0]
        if head in node.deps:
            continue
        graph = graph if graph is not None else {n.id: n.deps for n in wf.nodes}
        if head in graph and not _is_upstream(graph, head, node):
            raise WorkflowValidationError(
                f"workflow {wf.name!r}: node {node.id!r} {where}: $from {path!r} names node {head!r}, "
                f"which is not upstream of {node.id!r} (add it to deps)"
            )


def _is_upstream(graph: Mapping[str, Any], target: str, node: Node) -> bool:
    """Whether `target` is a dependency of `node`, directly or through others (a walk up its deps, stopping at `target`)."""
    seen: set[str] = set()
    stack = list(node.deps)
    while stack:
        current = stack.pop()
        if current == target:
            return True
        if current not in seen:
            seen.add(current)
            stack.extend(graph.get(current, ()))
    return False


def check_start_refs(wf: Workflow, context: Mapping[str, Any]) -> None:
    """A root node's references can read only the run's context: one it cannot answer never resolves, so the run is refused."""
    scope = refs.Scope(context=context, node_ids=frozenset(n.id for n in wf.nodes))
    for node in wf.nodes:
        if node.deps:
            continue
        keyed = [(f"input {key!r}", expr) for key, expr in node.inputs.items()]
        for where, expr in keyed + ([("skip_if", node.skip_if)] if node.skip_if is not None else []):
            try:
                resolve_ref(expr, scope)
            except refs.Unresolved as exc:
                raise WorkflowValidationError(
                    f"workflow {wf.name!r}: {exc.at(f'node {node.id!r} {where}')} (a root node reads only the run context)"
                ) from None


def find_cycle(wf: Workflow) -> list[str] | None:
    """One cycle as [a, b, ..., a] (following deps), or None."""
    deps = {n.id: list(n.deps) for n in wf.nodes}
    state: dict[str, int] = {}  # 1 on the stack, 2 done
    for start in deps:
        if state.get(start):
            continue
        stack: list[tuple[str, int]] = [(start, 0)]
        path: list[str] = [start]
        state[start] = 1
        while stack:
            current, i = stack[-1]
            if i < len(deps[current]):
                stack[-1] = (current, i + 1)
                nxt = deps[current][i]
                if state.get(nxt) == 1:
                    cycle = path[path.index(nxt):] + [nxt]
                    return list(reversed(cycle))
                if not state.get(nxt):
                    state[nxt] = 1
                    stack.append((nxt, 0))
                    path.append(nxt)
            else:
                state[current] = 2
                stack.pop()
                path.pop()
    return None


def topological_order(wf: Workflow) -> list[str]:
    """Node ids, every node after its deps (Kahn's algorithm, ties in definition order)."""
    from collections import deque

    index = {n.id: i for i, n in enumerate(wf.nodes)}
    waiting = {n.id: len(set(n.deps)) for n in wf.nodes}
    dependants: dict[str, list[str]] = {n.id: [] for n in wf.nodes}
    for n in wf.nodes:
        for d in set(n.deps):
            dependants[d].append(n.id)
    ready = deque(sorted((i for i, c in waiting.items() if c == 0), key=index.__getitem__))
    order: list[str] = []
    while ready:
        current = ready.popleft()
        order.append(current)
        for nxt in sorted(dependants[current], key=index.__getitem__):
            waiting[nxt] -= 1
            if waiting[nxt] == 0:
                ready.append(nxt)
    if len(order) != len(wf.nodes):
        raise WorkflowValidationError(f"workflow {wf.name!r}: cycle among {sorted(set(index) - set(order))}")
    return order


def _check_gpu_sizes(where: str, node: Node) -> None:
    """`gpus` and `vram_gb` size a gpu node's VRAM reservation (docs/gpu.md, "Several jobs per GPU")."""
    if node.queue != "gpu" or not node.runs_code:
        raise WorkflowValidationError(f"{where}: only a gpu node takes 'gpus' or 'vram_gb' (use queue='gpu')")
    try:
        check_gpus(node.gpus)
        check_vram_gb(node.vram_gb)
    except InvalidPayloadError as exc:
        raise WorkflowValidationError(f"{where}: {exc}") from None
