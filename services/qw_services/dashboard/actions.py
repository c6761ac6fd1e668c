"""The dashboard's four actions, each checked before anything is written so bad input changes nothing."""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from queue_workflows import cancel_run, node_queue, restart_run, submit_input
from queue_workflows.control import commands as worker_control
from queue_workflows.errors import InvalidPayloadError

WORKER_OPS = ("off-hard", "off-park", "on")
REASON_MAX = 200


def _field(form: Mapping[str, Any], name: str, *, required: bool = True) -> str | None:
    value = form.get(name)
    if value is None or (isinstance(value, str) and not value.strip()):
        if required:
            raise InvalidPayloadError(f"the form is missing the {name} field")
        return None
    if not isinstance(value, str):
        raise InvalidPayloadError(f"the {name} field must be text")
    return value.strip()


def _reason(form: Mapping[str, Any]) -> str | None:
    reason = _field(form, "reason", required=False)
    if reason is not None and len(reason) > REASON_MAX:
        raise InvalidPayloadError(f"the reason is {len(reason)} characters; at most {REASON_MAX}")
    return reason


def switch_worker(form: Mapping[str, Any], actor: str) -> str:
    """Turn one (host, queue) OFF (hard or park) or ON; the worker hears it through the control trigger."""
    host, queue, op = _field(form, "host"), _field(form, "queue"), _field(form, "op")
    assert host is not None and queue is not None
    if op not in WORKER_OPS:
        raise InvalidPayloadError(f"op must be one of {', '.join(WORKER_OPS)}, not {op!r}")
    if queue not in node_queue.NODE_QUEUES:
        node_queue.check_ingest_queue(queue)
    reason = _reason(form)
    if op == "on":
        row = worker_control.enable_worker(host, queue, requested_by=actor, reason=reason)
        return f"{host}/{queue}: ON (by {row['requested_by']})"
    row = worker_control.disable_worker(host, queue, "hard" if op == "off-hard" else "park", requested_by=actor, reason=reason)
    return f"{host}/{queue}: OFF ({row['stop_policy']}) (by {row['requested_by']})"


def cancel(run_id: int, form: Mapping[str, Any], actor: str) -> str:
    hard = form.get("hard") in ("1", "on", "true")
    reason = _reason(form)
    note = f"{actor}: {reason}" if reason else actor
    cancel_run(run_id, reason=note[:REASON_MAX], hard=hard, requested_by=actor)
    return f"run {run_id} cancelled{' (running nodes stopped)' if hard else ''}"


def restart(run_id: int, actor: str) -> str:
    restart_run(run_id, requested_by=actor)
    return f"run {run_id} restarted by {actor}"


def give_input(run_id: int, form: Mapping[str, Any], actor: str) -> str:
    node = _field(form, "node")
    text = _field(form, "value")
    assert node is not None and text is not None
    try:
        value = json.loads(text)
    except json.JSONDecodeError as exc:
        raise InvalidPayloadError(f"the value is not JSON ({exc.msg} at line {exc.lineno} column {exc.colno})") from None
    if not isinstance(value, dict):
        raise InvalidPayloadError(f"the value must be a JSON object, like {{\"approved\": true}}, not a {type(value).__name__}")
    submission = submit_input(run_id, node, value, requested_by=actor)
    return f"input for {node!r} of run {run_id} recorded (submission {submission}, by {actor})"
