"""Reading and writing `worker_controls`. A plain SQL upsert from any client does the same."""

from __future__ import annotations

from typing import Any, Literal

from psycopg.rows import dict_row

from queue_workflows import db
from queue_workflows.common import sqlfile
from queue_workflows.errors import InvalidNameError, InvalidPayloadError
from queue_workflows.payloads import check_note, shown
from queue_workflows.settings import HOST_LABEL_RE, QUEUE_NAME_RE

_CONTROL = sqlfile.load("queue_workflows.control", "control.sql")

POLICIES = ("hard", "park")
Policy = Literal["hard", "park"]


def _check(host_label: object, queue: object) -> None:
    if not isinstance(host_label, str) or not HOST_LABEL_RE.match(host_label):
        raise InvalidNameError(f"host label {shown(host_label)} is invalid: letters, digits, '.', '_', '-' (max 63)")
    if not isinstance(queue, str) or not QUEUE_NAME_RE.match(queue):
        raise InvalidNameError(f"queue name {shown(queue)} is invalid: lowercase letters, digits and _, max 32")


def check_switch(host_label: object, queue: object, policy: object = "hard", *, requested_by: object = None, reason: object = None) -> None:
    """Refuse, before anything is written, a switch the table cannot take (names, policy, notes)."""
    _check(host_label, queue)
    if policy not in POLICIES:
        raise InvalidPayloadError(f"stop policy must be one of {', '.join(POLICIES)}, not {shown(policy)}")
    check_note(requested_by, what="requested_by")
    check_note(reason, what="reason")


def _set(host_label: str, queue: str, state: str, policy: str, requested_by: str | None, reason: str | None, conn: db.Conn | None) -> dict[str, Any]:
    check_switch(host_label, queue, policy, requested_by=requested_by, reason=reason)
    params = {"host_label": host_label, "queue": queue, "desired_state": state, "stop_policy": policy,
              "requested_by": requested_by, "reason": reason}
    with db.transaction(conn) as c:
        row = c.cursor(row_factory=dict_row).execute(_CONTROL.sql("upsert_worker_control"), params).fetchone()
    assert row is not None
    return row


def disable_worker(
    host_label: str, queue: str, policy: Policy = "hard", *, requested_by: str | None = None,
    reason: str | None = None, conn: db.Conn | None = None,
) -> dict[str, Any]:
    """Turn the (host, queue) worker OFF: `hard` requeues its job and exits 79; `park` lets it finish first."""
    return _set(host_label, queue, "off", policy, requested_by, reason, conn)


def enable_worker(
    host_label: str, queue: str, *, requested_by: str | None = None, reason: str | None = None, conn: db.Conn | None = None
) -> dict[str, Any]:
    """Turn the (host, queue) worker back ON; a parked worker resumes in place."""
    return _set(host_label, queue, "on", "hard", requested_by, reason, conn)


def control_for(host_label: str, queue: str, conn: db.Conn | None = None) -> dict[str, Any] | None:
    _check(host_label, queue)
    with db.transaction(conn) as c:
        return c.cursor(row_factory=dict_row).execute(
            _CONTROL.sql("worker_control_for"), {"host_label": host_label, "queue": queue}
        ).fetchone()


def desired_state_for(host_label: str, queue: str, conn: db.Conn | None = None) -> str:
    """'on' or 'off'; a (host, queue) with no row is 'on'."""
    row = control_for(host_label, queue, conn)
    return str(row["desired_state"]) if row else "on"


def list_controls(conn: db.Conn | None = None) -> list[dict[str, Any]]:
    with db.transaction(conn) as c:
        return c.cursor(row_factory=dict_row).execute(_CONTROL.sql("list_worker_controls")).fetchall()
