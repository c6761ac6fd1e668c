"""The reference mini-language: how a node's inputs and `skip_if` name run context and upstream outputs.

    {"$value": X}                      X itself, never looked into (escape a literal "$..." dict)
    {"$from": "a.b.0.c", "default": D} a dotted path; D when it is missing (no default: unresolved)
    {"$eq": [A, B]} / {"$ne": [A, B]}  A == B / A != B, each side a literal or a reference
    {"$filter": SRC, "where": {"field.path": V | {"$eq": V} | {"$ne": V}}}
                                       the items of the list SRC whose fields match every condition

A path's first segment names a node (that node's output) or `context` (the run's initial context);
anything else is looked up in the run context merged with every completed node's output. Any
other dict or list is resolved member by member, so literals may hold references anywhere.

A `$from` that cannot be resolved when a node is enqueued stays a reference and is resolved late,
in the worker, just before the node runs (`Unresolved` there fails the node with its path).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from queue_workflows.errors import QueueWorkflowsError

CONTEXT = "context"  # a path's first segment naming the run's initial context; no node may take this id
OPERATORS = frozenset({"$value", "$from", "$eq", "$ne", "$filter"})


class MalformedReferenceError(QueueWorkflowsError, ValueError):
    """A reference that can never be resolved: unknown operator, wrong keys, bad path."""


class Unresolved(QueueWorkflowsError, LookupError):
    """A `$from` path with no value (yet) and no default; `at(where)` names the input or key it was read for."""

    def __init__(self, path: str, *, why: str | None = None, where: str | None = None) -> None:
        self.path, self.why, self.where = path, why, where
        reason = why or f"$from {path!r} has no value and no default"
        super().__init__(f"{where}: {reason}" if where else reason)

    def at(self, where: str) -> Unresolved:
        """The same miss, its message prefixed with `where` (outermost first), never re-quoted as a path."""
        return Unresolved(self.path, why=self.why, where=f"{where}: {self.where}" if self.where else where)


@dataclass
class Scope:
    """What references see: the run's initial context and the outputs of completed nodes (in completion order)."""

    context: Mapping[str, Any] = field(default_factory=dict)
    outputs: Mapping[str, Any] = field(default_factory=dict)
    node_ids: frozenset[str] = frozenset()

    def merged(self) -> dict[str, Any]:
        merged = dict(self.context)
        for delta in self.outputs.values():
            if isinstance(delta, Mapping):
                merged.update(delta)
        return merged

    def lookup(self, path: str) -> Any:
        segments = path.split(".")
        head = segments[0]
        if head == CONTEXT:
            value: Any = self.context
            rest = segments[1:]
        elif head in self.node_ids or head in self.outputs:
            if head not in self.outputs:
                raise Unresolved(path)
            value, rest = self.outputs[head], segments[1:]
        else:
            value, rest = self.merged(), segments
        for segment in rest:
            if isinstance(value, Mapping) and segment in value:
                value = value[segment]
            elif isinstance(value, list) and segment.lstrip("-").isdigit() and -len(value) <= int(segment) < len(value):
                value = value[int(segment)]
            else:
                raise Unresolved(path)
        return value


def _fail(where: str, why: str) -> MalformedReferenceError:
    return MalformedReferenceError(f"{where}: malformed reference: {why}")


def check(expr: Any, where: str = "reference") -> None:
    """Raise MalformedReferenceError (naming `where`) unless `expr` is well formed."""
    if isinstance(expr, list):
        for i, item in enumerate(expr):
            check(item, f"{where}[{i}]")
        return
    if not isinstance(expr, Mapping):
        return
    ops = [k for k in expr if isinstance(k, str) and k.startswith("$")]
    if not ops:
        for key, value in expr.items():
            check(value, f"{where}.{key}")
        return
    if len(ops) > 1:
        raise _fail(where, f"one operator per mapping, found {', '.join(sorted(ops))}")
    op = ops[0]
    if op not in OPERATORS:
        raise _fail(where, f"unknown operator {op!r} (known: {', '.join(sorted(OPERATORS))})")
    allowed = {"$value": {"$value"}, "$from": {"$from", "default"}, "$eq": {"$eq"}, "$ne": {"$ne"}, "$filter": {"$filter", "where"}}[op]
    extra = sorted(set(expr) - allowed)
    if extra:
        raise _fail(where, f"{op} does not take {', '.join(map(repr, extra))}")
    if op == "$from":
        path = expr["$from"]
        if not isinstance(path, str) or not path or any(not s for s in path.split(".")):
            raise _fail(where, f"$from needs a dotted path like 'node.key', not {path!r}")
        if "default" in expr:
            check(expr["default"], f"{where}.default")
    elif op in ("$eq", "$ne"):
        pair = expr[op]
        if not isinstance(pair, list) or len(pair) != 2:
            raise _fail(where, f"{op} takes a list of two operands, not {pair!r}")
        check(pair, f"{where}.{op}")
    elif op == "$filter":
        check(expr["$filter"], f"{where}.$filter")
        conditions = expr.get("where", {})
        if not isinstance(conditions, Mapping):
            raise _fail(where, f"$filter 'where' must map field paths to conditions, not {conditions!r}")
        for path, cond in conditions.items():
            if isinstance(cond, Mapping) and any(str(k).startswith("$") for k in cond):
                if set(cond) - {"$eq", "$ne"} or len(cond) != 1:
                    raise _fail(where, f"$filter condition on {path!r} must be a value, {{'$eq': v}} or {{'$ne': v}}")


def from_paths(expr: Any) -> list[str]:
    """Every `$from` path in `expr` (for validation and to tell late references apart)."""
    if isinstance(expr, list):
        return [p for item in expr for p in from_paths(item)]
    if not isinstance(expr, Mapping) or "$value" in expr:
        return []
    found = [expr["$from"]] if isinstance(expr.get("$from"), str) else []
    for key, value in expr.items():
        if key != "$from":
            found.extend(from_paths(value))
    return found


def resolve(expr: Any, scope: Scope) -> Any:
    """The value of `expr` in `scope`; raises Unresolved for a missing `$from` without a default."""
    if isinstance(expr, list):
        return [resolve(item, scope) for item in expr]
    if not isinstance(expr, Mapping):
        return expr
    if "$value" in expr:
        return expr["$value"]
    if "$from" in expr:
        try:
            return scope.lookup(expr["$from"])
        except Unresolved:
            if "default" in expr:
                return resolve(expr["default"], scope)
            raise
    if "$eq" in expr:
        a, b = expr["$eq"]
        return resolve(a, scope) == resolve(b, scope)
    if "$ne" in expr:
        a, b = expr["$ne"]
        return resolve(a, scope) != resolve(b, scope)
    if "$filter" in expr:
        items = resolve(expr["$filter"], scope)
        if not isinstance(items, list):
            paths = from_paths(expr["$filter"])
            raise Unresolved(paths[0] if paths else "$filter", why=f"$filter source is a {type(items).__name__}, not a list")
        conditions = {path: resolve(cond, scope) if not _is_cond(cond) else cond for path, cond in expr.get("where", {}).items()}
        return [item for item in items if all(_matches(item, path, cond, scope) for path, cond in conditions.items())]
    return {key: resolve(value, scope) for key, value in expr.items()}


def _is_cond(cond: Any) -> bool:
    return isinstance(cond, Mapping) and len(cond) == 1 and next(iter(cond)) in ("$eq", "$ne")


def _matches(item: Any, path: str, cond: Any, scope: Scope) -> bool:
    try:
        value = Scope(context=item if isinstance(item, Mapping) else {}).lookup(path) if isinstance(item, Mapping) else item
    except Unresolved:
        return False
    if _is_cond(cond):
        op, expected = next(iter(cond.items()))
        expected = resolve(expected, scope)
        return bool(value == expected) if op == "$eq" else bool(value != expected)
    return bool(value == cond)


def resolve_ref(expr: Any, scope: Scope | Mapping[str, Any]) -> Any:
    """The seed's name: `scope` may be a plain context mapping."""
    return resolve(expr, scope if isinstance(scope, Scope) else Scope(context=scope))


def resolve_inputs(
    inputs: Mapping[str, Any], scope: Scope, resolver: Callable[[Any, Scope], Any] | None = None
) -> tuple[dict[str, Any], dict[str, Any]]:
    """(resolved inputs, the ones left as late references because they are not resolvable yet).

    `resolver(expr, scope)` replaces `resolve` (the host's, `hooks.set_ref_resolver`).
    """
    resolve_one = resolver or resolve
    resolved: dict[str, Any] = {}
    late: dict[str, Any] = {}
    for name, expr in inputs.items():
        try:
            resolved[name] = resolve_one(expr, scope)
        except Unresolved:
            late[name] = expr
    return resolved, late
