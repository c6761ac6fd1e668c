"""Events for wait_event nodes: `send_event` records one; the timekeeper matches events to waiting nodes.

An event is a row of `workflow_events` (migration 0038): a key, a JSON-object payload, and
optionally the one run it is for. `send_event` checks it first, but a plain SQL INSERT works
too; either way its trigger wakes the orchestrator's timekeeper, which in one transaction
(`process_events`): refuses what the API would have refused and events for a run that has ended
(`rejected`, with the reason); completes each node waiting on the key with the payload as its
output (the 0013 trigger writes its outbox event, so dependants follow) and marks the event
`applied`, the oldest event winning; keeps an event no node waits for yet (`kept`) for the node
that will; and refuses one whose (run, key) already took an event or timed out.
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

CHANNEL = "qw_timer"  # the timekeeper's: a new event, a new deadline, a new waiter


def send_event(key: str, payload: dict[str, Any], *, run_id: int | None = None, requested_by: str | None = None,
               conn: db.Conn | None = None) -> int:
    """Record an event on `key` (a JSON-object payload, the waiting node's output); returns its id.

    `run_id` narrows it to that run's waiter; without it, every node waiting on `key` takes it.
    Refused, writing nothing: InvalidPayloadError for an empty or overlong key or a payload that
    is not a JSON object (or too big); RunStateError for a run that does not exist. Whether the
    event was applied, kept or rejected (and why) is on its row moments later: `event_status`.
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
    return int(row["id"])


def event_status(event_id: int, *, conn: db.Conn | None = None) -> dict[str, Any]:
    """An event's row: status ('pending', 'kept', 'applied', 'rejected'), error, applied_to (node job ids), ..."""
    check_id(event_id, what="event id")
    with db.transaction(conn) as c, c.cursor(row_factory=dict_row) as cur:
        row = cur.execute(_TIMERS["event_get"], {"id": event_id}).fetchone()
    if row is None:
        raise LookupError(f"no event {event_id}")
    return dict(row)


def process_events(conn: db.Conn, *, limit: int = 500) -> bool:
    """One pass over new events and waiters, in the caller's transaction; True when a batch came full (call again)."""
    with conn.cursor(row_factory=dict_row) as cur:
        refused = cur.execute(_TIMERS["event_reject_invalid"], {"limit": limit}).fetchall()
        match = cur.execute(_TIMERS["event_match"], {"limit": limit}).fetchone()
        sorted_out = cur.execute(_TIMERS["event_keep_or_refuse"], {"limit": limit}).fetchall()
    for row in refused + [r for r in sorted_out if r["status"] == "rejected"]:
        log.info("event %s rejected: %s", row["id"], row["error"])
    return len(refused) >= limit or match["paired"] >= limit or len(sorted_out) >= limit
