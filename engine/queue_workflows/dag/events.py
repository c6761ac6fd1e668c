"""Events for wait_event nodes: `send_event` records one; it is delivered in the sender's transaction.

An event is a row of `workflow_events` (migration 0038): a key, a JSON-object payload, and
optionally the one run it is for. `send_event` checks it first, but a plain SQL INSERT works
too: the insert trigger delivers it either way, in the sender's transaction (so it takes effect
only if that commits, and the first of two concurrent events to commit wins). It completes each
node waiting on the key with the payload as its output (the 0013 trigger writes its outbox
event, so dependants follow) and is `applied`; is `rejected` with the reason (a payload that is
not a JSON object, a run that has ended, a (run, key) that already took an event or timed out);
or is `kept` for the node that will wait on its key. The orchestrator's timekeeper hands kept
events to such nodes when they are reached (`process_events`), the oldest first.
"""

from __future__ import annotations

import logging
from typing import Any

from psycopg.rows import dict_row

from queue_workflows import config, db
from queue_workflows.common import sqlfile
from queue_workflows.dag import audit
from queue_workflows.dag.control import RunStateError, write_cursor
from queue_workflows.errors import InvalidPayloadError
from queue_workflows.payloads import MAX_NAME_CHARS, check_id, check_text, json_object

log = logging.getLogger(__name__)

_TIMERS = sqlfile.load("queue_workflows.dag", "timers.sql")

CHANNEL = "qw_timer"  # the timekeeper's: a new deadline, a new waiter, a kept event


def send_event(key: str, payload: dict[str, Any], *, run_id: int | None = None, requested_by: str | None = None,
               conn: db.Conn | None = None) -> dict[str, Any]:
    """Send an event on `key` (a JSON-object payload: the waiting node's output); returns its row, delivered.

    `run_id` narrows it to that run's waiter; without it, every node waiting on `key` takes it.
    The row says what became of it: `status` 'applied' (`applied_to`: the node job ids it
    completed), 'kept' (no node waits on the key yet: the first to wait takes it) or 'rejected'
    (`error` says why: the node already took an event, the run is cancelled, ...). With `conn`
    it joins the caller's transaction and takes effect when that commits. Refused, writing
    nothing: InvalidPayloadError for an empty or overlong key or a payload that is not a JSON
    object (or too big); RunStateError for a run that does not exist.
    """
    check_text(key, what="event key", max_chars=MAX_NAME_CHARS)
    audit.check_requested_by(requested_by)
    if run_id is not None:
        check_id(run_id, what="run id")
    if not isinstance(payload, dict):
        raise InvalidPayloadError(f"an event payload must be a JSON object (it becomes the node's output), not {type(payload).__name__}")
    body = json_object(payload, what="event payload", max_bytes=config.current().settings.max_payload_bytes)
    with write_cursor(conn) as cur:
        if run_id is not None and cur.execute(_TIMERS["event_run_status"], {"run_id": run_id}).fetchone() is None:
            raise RunStateError(f"no workflow run {run_id}")
        row = cur.execute(_TIMERS["event_insert"],
                          {"event_key": key, "run_id": run_id, "payload": body, "requested_by": requested_by}).fetchone()
    if row["status"] == "rejected":
        log.info("event %s on key %r rejected: %s", row["id"], key, row["error"])
    return dict(row)


def event_status(event_id: int, *, conn: db.Conn | None = None) -> dict[str, Any]:
    """An event's row as it stands now (a kept event becomes applied when its node is reached)."""
    check_id(event_id, what="event id")
    with db.transaction(conn) as c, c.cursor(row_factory=dict_row) as cur:
        row = cur.execute(_TIMERS["event_get"], {"id": event_id}).fetchone()
    if row is None:
        raise LookupError(f"no event {event_id}")
    return dict(row)


def process_events(conn: db.Conn, *, limit: int = 500) -> bool:
    """Hand kept events to the nodes now waiting on their key (one statement); True when a batch came full (call again)."""
    with conn.cursor(row_factory=dict_row) as cur:
        done = cur.execute(_TIMERS["event_process"], {"limit": limit}).fetchone()
    for row in done["rejected"] or []:  # type: ignore[index]
        log.info("event %s rejected: %s", row["id"], row["error"])
    return bool(done["paired"] >= limit)  # type: ignore[index]
