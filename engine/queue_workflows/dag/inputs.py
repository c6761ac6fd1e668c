"""Input steps: a node that waits (`awaiting_input`) for a value someone submits.

A submission is a row of `workflow_input_submissions` (migration 0014): `submit_input` checks it
first, but any process may insert one with plain SQL; the insert NOTIFYs `qw_input`. The
orchestrator's input listener claims pending submissions (`processing`, committed), then applies
each in one transaction: the node becomes `completed` with the value as its output
(`context_delta`), whose outbox event the 0013 trigger writes in that same transaction, and the
submission becomes `applied` - or `rejected` with the reason (the node is not awaiting input, the
run is not running, the value is not a JSON object), changing nothing else. A submission left in
`processing` by a listener that died is put back to `pending` after `stale_seconds`.
`restart_run` rejects every submission not applied yet: it answered the run's previous life.
Everything that touches a run's submissions locks the run row first, so they serialise.
"""

from __future__ import annotations

import logging
import os
import socket
from typing import Any

import psycopg
from psycopg.rows import dict_row
from psycopg.types.json import Jsonb

from queue_workflows import config, db
from queue_workflows.common import sqlfile
from queue_workflows.dag import audit
from queue_workflows.dag.control import write_cursor
from queue_workflows.errors import InvalidPayloadError, QueueWorkflowsError
from queue_workflows.jobrow import JobStatus
from queue_workflows.payloads import check_id, json_object, shown

_DAG = sqlfile.load("queue_workflows.dag", "dag.sql")

log = logging.getLogger(__name__)

CHANNEL = "qw_input"


class InputNotAwaitedError(QueueWorkflowsError, LookupError):
    """The run or node does not exist, or the node is not awaiting input."""


def submit_input(run_id: int, node_name: str, value: Any, *, requested_by: str | None = None, conn: db.Conn | None = None) -> int:
    """Record `value` (a JSON object) as the answer to input step `node_name` of run `run_id`; returns the submission id.

    Refused, writing nothing: InvalidPayloadError for a value that is not a JSON object (or too
    big), InputNotAwaitedError for a missing run or node, a run that is not running, or a node
    that is not awaiting input (its status is named). The listener resumes the node moments later.
    `requested_by` goes in the run's audit trail with the submission id.
    """
    audit.check_requested_by(requested_by)
    check_id(run_id, what="run id")
    if not isinstance(node_name, str) or not node_name:
        raise InvalidPayloadError(f"node name must be a non-empty string, not {shown(node_name)}")
    if not isinstance(value, dict):
        raise InvalidPayloadError(f"an input value must be a JSON object (it becomes the node's output), not {type(value).__name__}")
    payload = json_object(value, what="input value", max_bytes=config.current().settings.max_payload_bytes)
    with write_cursor(conn) as cur:
        run = cur.execute(_DAG["dag_lock_run"], {"run_id": run_id}).fetchone()  # serialises with restart_run
        _check_awaited(cur, run, run_id, node_name)
        row = cur.execute(_DAG["dag_insert_submission"], {"run_id": run_id, "node_name": node_name, "value": payload}).fetchone()
        audit.record(cur, run_id, "input", requested_by=requested_by, detail=f"submission {row['id']}", node_name=node_name)
    return int(row["id"])


def _check_awaited(cur: Any, run: dict[str, Any] | None, run_id: int, node_name: str) -> None:
    if run is None:
        raise InputNotAwaitedError(f"no workflow run {run_id}")
    nodes = {n.get("id"): n for n in (run["definition"] or {}).get("nodes", [])}
    if node_name not in nodes:
        raise InputNotAwaitedError(f"run {run_id} ({run['workflow_name']}) has no node {node_name!r}")
    if nodes[node_name].get("kind") != "input":
        raise InputNotAwaitedError(f"node {node_name!r} of run {run_id} is not an input step")
    if run["status"] != "running":
        raise InputNotAwaitedError(f"run {run_id} is {run['status']}: it takes no input")
    node = cur.execute(_DAG["dag_node_state"], {"run_id": run_id, "node_name": node_name}).fetchone()
    status = node["status"] if node else "pending (not reached yet)"
    if status != JobStatus.AWAITING_INPUT:
        raise InputNotAwaitedError(f"node {node_name!r} of run {run_id} is {status}, not awaiting input")


def claim_submissions(conn: db.Conn, listener: str, *, limit: int = 100) -> list[dict[str, Any]]:
    """Mark up to `limit` pending submissions `processing` for `listener` (committed before they are applied)."""
    with conn.transaction():
        return conn.cursor(row_factory=dict_row).execute(_DAG["dag_claim_submissions"], {"listener": listener, "limit": limit}).fetchall()


def apply_submission(conn: db.Conn, submission_id: int, listener: str) -> str | None:
    """Apply one claimed submission in one transaction: 'applied', 'rejected', or None (no longer ours)."""
    with conn.transaction(), conn.cursor(row_factory=dict_row) as cur:
        claim = {"id": submission_id, "listener": listener}
        seen = cur.execute(_DAG["dag_get_submission"], claim).fetchone()
        if seen is None:
            return None  # reclaimed meanwhile, or another listener has it now
        run = cur.execute(_DAG["dag_lock_run"], {"run_id": seen["run_id"]}).fetchone()  # the run first, as restart_run
        sub = cur.execute(_DAG["dag_lock_submission"], claim).fetchone()
        if sub is None:
            return None  # rejected by a restart meanwhile, or reclaimed
        error = None
        try:
            _check_awaited(cur, run, sub["run_id"], sub["node_name"])
            if not isinstance(sub["value"], dict):
                error = f"an input value must be a JSON object, not {type(sub['value']).__name__}"
        except InputNotAwaitedError as exc:
            error = str(exc)
        if error is None:
            params = {"run_id": sub["run_id"], "node_name": sub["node_name"], "value": Jsonb(sub["value"])}
            cur.execute(_DAG["dag_resume_input_node"], params)
        status = "rejected" if error else "applied"
        cur.execute(_DAG["dag_submission_done"], {"id": submission_id, "status": status, "error": error})
    if error:
        log.warning("input submission %s rejected: %s", submission_id, error)
    return status


def reclaim_submissions(conn: db.Conn, *, stale_seconds: float = 30.0, max_attempts: int = 5) -> list[dict[str, Any]]:
    """Put submissions stuck in `processing` for over `stale_seconds` back to pending (rejected after `max_attempts`)."""
    with conn.transaction():
        rows = conn.cursor(row_factory=dict_row).execute(
            _DAG["dag_reclaim_submissions"], {"stale_seconds": stale_seconds, "max_attempts": max_attempts}
        ).fetchall()
    if rows:
        log.warning("reclaimed %d input submission(s) stuck in processing: %s", len(rows), rows)
    return rows


def process_inputs(conn: db.Conn, listener: str | None = None, *, stale_seconds: float = 30.0, limit: int = 100) -> int:
    """One pass of the input listener: reclaim stale claims, claim pending submissions, apply each; returns how many were applied or rejected."""
    listener = listener or default_listener_id()
    reclaim_submissions(conn, stale_seconds=stale_seconds)
    done = 0
    for sub in claim_submissions(conn, listener, limit=limit):
        try:
            if apply_submission(conn, sub["id"], listener) is not None:
                done += 1
        except psycopg.OperationalError:
            raise
        except Exception:  # noqa: BLE001 - left in processing: the reclaim retries it
            log.exception("input submission %s could not be applied", sub["id"])
    return done


def default_listener_id() -> str:
    return f"{socket.gethostname()}:{os.getpid()}"
