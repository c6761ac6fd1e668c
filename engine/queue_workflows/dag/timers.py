"""Sleep and wait_event nodes: their checks, and the 'waiting' row a node becomes when the dispatcher reaches it.

A `sleep` node (`"for": seconds` or `"until": ISO 8601`) and a `wait_event` node (`"key"`, an
optional `"timeout"` in seconds and `"default"` output) run nothing: reached, each is inserted
`waiting` with its deadline (`wake_at`) and key (`event_key`) on the row, resolved from its
references at that moment, and the orchestrator's timekeeper (`dag/timekeeper.py`) completes it.
The resolved values are kept as the row's `inputs`, which is what a restart re-arms from: a
restarted `for` sleep (and an event wait's timeout) counts again from the restart, an `until`
keeps its absolute time and fires at once when that has passed.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from datetime import datetime
from typing import Any

from psycopg.types.json import Jsonb

from queue_workflows import config
from queue_workflows.common import sqlfile
from queue_workflows.dag import hooks, refs
from queue_workflows.dag.definition import TIMER_KEYS, Node, WorkflowValidationError
from queue_workflows.errors import InvalidPayloadError
from queue_workflows.payloads import MAX_NAME_CHARS, check_text, json_object, shown

_TIMERS = sqlfile.load("queue_workflows.dag", "timers.sql")

MAX_SECONDS = 10 * 366 * 86400  # ten years: past that a number of seconds is a unit mistake
REFERENCED = ("for", "until", "key", "timeout")  # `default` is an output, taken verbatim
OWN_KEYS = {"sleep": ("for", "until"), "wait_event": ("key", "timeout", "default")}


def check_node(where: str, node: Node) -> None:
    """WorkflowValidationError naming the node and key for a malformed sleep or wait_event (or a stray timer key)."""
    given = dict(node.timer or {})
    if not node.is_timer:
        if given:
            raise WorkflowValidationError(f"{where}: {', '.join(repr(k) for k in given)} belong(s) to a sleep or wait_event node, "
                                          f"not a {node.kind!r} node")
        return
    if node.call is not None:
        raise WorkflowValidationError(f"{where}: a {node.kind} node runs nothing: give it no 'call' (got {shown(node.call)})")
    if node.queue != "cpu" or node.model is not None:
        raise WorkflowValidationError(f"{where}: a {node.kind} node takes no queue or model (the orchestrator holds it)")
    if node.inputs:
        raise WorkflowValidationError(f"{where}: a {node.kind} node takes no inputs (its keys are {', '.join(OWN_KEYS[node.kind])})")
    stray = [k for k in given if k not in OWN_KEYS[node.kind]]
    if stray:
        raise WorkflowValidationError(f"{where}: {stray[0]!r} is not a key of a {node.kind} node ({', '.join(OWN_KEYS[node.kind])})")
    for key in REFERENCED:
        if key in given and isinstance(given[key], Mapping):
            try:
                refs.check(given[key], f"{where}: {key!r}")
            except refs.MalformedReferenceError as exc:
                raise WorkflowValidationError(str(exc)) from None
    try:
        _check_values(node.kind, given)
    except ValueError as exc:
        raise WorkflowValidationError(f"{where}: {exc}") from None


def _check_values(kind: str, given: Mapping[str, Any]) -> None:
    """ValueError for a literal value that can never work (references are judged when the node is reached)."""
    literal = {k: v for k, v in given.items() if not (k in REFERENCED and isinstance(v, Mapping))}
    if kind == "sleep":
        if ("for" in given) == ("until" in given):
            raise ValueError("a sleep needs exactly one of 'for' (seconds) and 'until' (an ISO 8601 time)")
        if "for" in literal:
            seconds(literal["for"], "for", allow_zero=True)
        if "until" in literal:
            instant(literal["until"])
        return
    if "key" not in given:
        raise ValueError("a wait_event node needs a 'key' (the key send_event names)")
    if "key" in literal:
        event_key(literal["key"])
    if "timeout" in literal:
        seconds(literal["timeout"], "timeout", allow_zero=False)
    if "default" in given:
        if not isinstance(given["default"], dict):
            raise ValueError(f"'default' must be a JSON object (the node's output on timeout), not {type(given['default']).__name__}")
        try:
            json_object(given["default"], what="'default'", max_bytes=config.current().settings.max_payload_bytes)
        except InvalidPayloadError as exc:
            raise ValueError(str(exc)) from None
        if "timeout" not in given:
            raise ValueError("'default' is the output on timeout: give a 'timeout' too")


def seconds(value: Any, key: str, *, allow_zero: bool) -> float:
    """A finite number of seconds, 0 (or more than 0) to ten years; ValueError naming the key otherwise."""
    low = "0 or more" if allow_zero else "more than 0"
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise ValueError(f"{key!r} must be a number of seconds ({low}), not {shown(value)}")
    if value < 0 or (value == 0 and not allow_zero) or value > MAX_SECONDS:
        raise ValueError(f"{key!r} must be a number of seconds ({low}, at most {MAX_SECONDS}), not {shown(value)}")
    return float(value)


def instant(value: Any) -> datetime:
    """An ISO 8601 time with its UTC offset ('2026-05-01T09:00:00Z'); ValueError naming 'until' otherwise."""
    if not isinstance(value, str):
        raise ValueError(f"'until' must be an ISO 8601 time string, not {shown(value)}")
    try:
        when = datetime.fromisoformat(value)
    except ValueError:
        raise ValueError(f"'until' is not an ISO 8601 time: {shown(value)}") from None
    if when.tzinfo is None:
        raise ValueError(f"'until' needs a UTC offset (e.g. 'Z' or '+02:00'), not {shown(value)}")
    return when


def event_key(value: Any) -> str:
    try:
        return check_text(value, what="'key'", max_chars=MAX_NAME_CHARS)
    except InvalidPayloadError as exc:
        raise ValueError(str(exc)) from None


def resolved(node: Node, scope: refs.Scope) -> tuple[dict[str, Any], str | None]:
    """The node's keys with their references resolved, and the error that fails the node (None when it can wait)."""
    given = dict(node.timer)
    try:
        values = {k: hooks.resolve_ref(v, scope) if k in REFERENCED else v for k, v in given.items()}
        _check_values(node.kind, values)
    except refs.Unresolved as exc:
        return {}, str(exc.at(f"node {node.id!r}"))
    except ValueError as exc:
        return {}, f"node {node.id!r}: {exc}"
    return values, None


def row(run: Mapping[str, Any], node: Node, scope: refs.Scope) -> dict[str, Any]:
    """The parameters of `timer_insert_node` / `timer_rearm_node` for a reached (or restarted) node."""
    values, error = resolved(node, scope)
    until = instant(values["until"]) if "until" in values else None
    after = values.get("for", values.get("timeout"))
    return {
        "run_id": run["id"], "node_name": node.id, "priority": run["priority"], "inputs": Jsonb(values),
        "until": until, "after_seconds": None if after is None else float(after),
        "event_key": values.get("key") if node.kind == "wait_event" else None, "error": error,
    }


def insert_waiting(cur: Any, rows: list[dict[str, Any]]) -> None:
    """Insert reached timer nodes 'waiting'; one whose values did not resolve fails at once (its outbox event follows)."""
    cur.executemany(_TIMERS["timer_insert_node"], rows)
    _fail(cur, rows)


def rearm(cur: Any, rows: list[dict[str, Any]]) -> None:
    """Put reset timer nodes of a restarted run back to 'waiting' with a fresh deadline (see the module docstring)."""
    cur.executemany(_TIMERS["timer_rearm_node"], rows)
    _fail(cur, rows)


def _fail(cur: Any, rows: list[dict[str, Any]]) -> None:
    failed = [{"run_id": r["run_id"], "node_name": r["node_name"], "error": r["error"]} for r in rows if r["error"]]
    if failed:
        cur.executemany(_TIMERS["timer_fail_node"], failed)


def status_fields(kind: str | None, job: Mapping[str, Any] | None) -> dict[str, Any]:
    """What run_status adds for a timer node: a sleep's `wake_at`; an event wait's `event_key` and `timeout_at`."""
    if kind == "sleep":
        return {"wake_at": job["wake_at"] if job else None}
    if kind == "wait_event":
        return {"event_key": job["event_key"] if job else None, "timeout_at": job["wake_at"] if job else None}
    return {}


def scoped(node: Node) -> bool:
    """Whether reaching the node needs the run's scope (a `$from` in its keys)."""
    return any(refs.from_paths(node.timer.get(k)) for k in REFERENCED)


__all__ = ["TIMER_KEYS", "check_node", "insert_waiting", "rearm", "resolved", "row", "scoped"]
