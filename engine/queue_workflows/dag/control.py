"""Cancel, restart and reconcile DAG runs; the cooperative cancel flag a node may poll.

- `cancel_run(run_id)`: the run is cancelled; its not-started nodes (scheduled, queued,
  awaiting_input) are cancelled in the same transaction, so no worker can claim them. A running
  node is told through the cooperative flag (`cancelled()` / `run_cancelled(run_id)`) and left
  to finish; its result is kept on its row but ignored (the run stays cancelled). `hard=True`
  also cancels running nodes: the status change revokes the job and its worker exits 77. Child
  runs below are cancelled with it (migration 0039's cascade; `hard` reaches their running nodes).
  Migration 0014's guard trigger turns any later (re)queue of a node of a cancelled (or failed)
  run - a retry, a reclaim, a hand-back - into 'cancelled', so nothing of it is claimed again.
- `restart_run(run_id)`: a failed or cancelled run goes back to running; its failed and
  cancelled nodes are reset in place (fresh attempts, input steps back to awaiting_input, sleeps
  and event waits back to waiting with a fresh deadline: `timers`), its
  completed outputs and skipped markers are kept, and the dispatcher enqueues the never-run
  nodes that are ready. The unique (run_id, node_name) makes a duplicate node impossible. A
  failed or cancelled child run is restarted in place, the same way, with its parent.
- `reconcile_runs(conn)`: the orchestrator's sweep for a running run with no live node and no
  pending outbox event (a crash in an odd place, an event deleted by hand): the pure dispatcher
  re-derives its next step from the node states, or finishes/fails it; and for a run inserted
  as 'queued' by plain SQL, which it starts (or fails, naming what is invalid). A run whose step
  keeps raising (a definition written by hand with a cycle) is retried with a backoff and
  poison-flagged after `dispatch_max_attempts` sweeps, counted on its row, as the outbox does,
  and left for an operator.
"""

from __future__ import annotations

import contextvars
import logging
import time
from collections.abc import Iterator
from contextlib import contextmanager, nullcontext
from typing import Any

import psycopg
from psycopg.rows import dict_row

from queue_workflows import config, db
from queue_workflows.common import sqlfile
from queue_workflows.dag import audit, store, timers
from queue_workflows.dag import map as mapping
from queue_workflows.dag.definition import Workflow
from queue_workflows.errors import QueueWorkflowsError
from queue_workflows.payloads import check_id, check_note, clean_text

_DAG = sqlfile.load("queue_workflows.dag", "dag.sql")
_CHILD = sqlfile.load("queue_workflows.dag", "child.sql")

log = logging.getLogger(__name__)

_current_run: contextvars.ContextVar[int | None] = contextvars.ContextVar("qw_current_run", default=None)


class RunStateError(QueueWorkflowsError, LookupError):
    """No such run, or the run is not in a state that allows the operation."""


def _locked_run(cur: Any, run_id: int) -> dict[str, Any]:
    check_id(run_id, what="run id")
    run = cur.execute(_DAG["dag_lock_run"], {"run_id": run_id}).fetchone()
    if run is None:
        raise RunStateError(f"no workflow run {run_id}")
    if run["definition"] is None:
        raise RunStateError(f"run {run_id} is not a DAG run (it has no definition)")
    return run


@contextmanager
def write_cursor(conn: db.Conn | None) -> Iterator[Any]:
    """A dict-row cursor in the caller's transaction (`conn`), or in one of its own that commits on exit."""
    with db.transaction(conn) as c:
        with c.transaction() if c.autocommit else nullcontext(), c.cursor(row_factory=dict_row) as cur:
            yield cur


def cancel_run(run_id: int, *, reason: str | None = None, hard: bool = False, requested_by: str | None = None,
               conn: db.Conn | None = None) -> dict[str, Any]:
    """Cancel a running run. Returns {'run_id', 'cancelled': [node names], 'running': [node names left to finish]},
    and 'child_runs': [ids] when it reached live child runs below (cancelled by migration 0039's cascade).

    With `conn`, it joins the caller's transaction. RunStateError when the run does not exist
    or has already ended (completed, failed or cancelled). `requested_by` goes in the run's
    audit trail (`run_actions`).
    """
    check_note(reason, what="reason")
    audit.check_requested_by(requested_by)
    note = f"cancelled by the operator: {reason}" if reason else "cancelled by the operator"
    with write_cursor(conn) as cur:
        run = _locked_run(cur, run_id)
        if run["status"] in store.TERMINAL_RUN:
            raise RunStateError(f"run {run_id} is {run['status']}: only a running run can be cancelled")
        below = cur.execute(_CHILD["child_lock_descendants"], {"run_id": run_id}).fetchall()  # before any row changes
        cur.execute(_DAG["dag_cancel_run"], {"run_id": run_id, "reason": note})
        audit.record(cur, run_id, "cancel", requested_by=requested_by, detail=("hard: " if hard else "") + (reason or ""))
        # A waiting child node's cancel cancels its child run, and so on down (migration 0039's trigger).
        done = cur.execute(_DAG["dag_cancel_open_nodes"], {"run_id": run_id, "reason": note, "hard": bool(hard)}).fetchall()
        if hard and below:
            cur.execute(_CHILD["child_hard_cancel_running"], {"run_id": run_id, "reason": f"{note} (its parent run {run_id})"})
        running = cur.execute(_DAG["dag_running_nodes"], {"run_id": run_id}).fetchall()
    result = {"run_id": run_id, "cancelled": [r["node_name"] for r in done], "running": [r["node_name"] for r in running]}
    return {**result, "child_runs": [r["id"] for r in below]} if below else result  # the same shape as before child runs


def restart_run(run_id: int, *, requested_by: str | None = None, conn: db.Conn | None = None) -> dict[str, Any]:
    """Put a failed or cancelled run back to running. Returns {'run_id', 'reset': [names], 'enqueued': [names]},
    and 'child_runs': [ids] when child runs were restarted in place or started.

    Only failed/cancelled nodes are reset (fresh attempts) and never-run ready nodes enqueued;
    completed and skipped nodes keep their rows and outputs. Input answers not applied yet are
    rejected: a reset input step waits for a new one. RunStateError for a run that is
    missing, still running, or completed. `requested_by` goes in the run's audit trail.
    """
    audit.check_requested_by(requested_by)
    with write_cursor(conn) as cur:
        return _restart(cur, run_id, requested_by, "")


def _restart(cur: Any, run_id: int, requested_by: str | None, why: str) -> dict[str, Any]:
    run = _locked_run(cur, run_id)
    if run["status"] not in ("failed", "cancelled"):
        raise RunStateError(f"run {run_id} is {run['status']}: only a failed or cancelled run can be restarted")
    wf = Workflow.from_dict(run["definition"])
    cur.execute(_DAG["dag_restart_run"], {"run_id": run_id})  # first: the cancelled-run guard must not fire
    stale = cur.execute(_DAG["dag_reject_stale_submissions"],
                        {"run_id": run_id, "error": f"run {run_id} was restarted before this answer was applied: submit it again"}).fetchall()
    input_steps = [n.id for n in wf.nodes if n.is_input]
    child_nodes = [n.id for n in wf.nodes if n.is_child]
    maps = [n.id for n in wf.nodes if n.is_map]
    reset = cur.execute(_DAG["dag_reset_nodes"], {"run_id": run_id, "input_steps": input_steps, "held": child_nodes, "maps": maps}).fetchall()
    nodes = wf.by_id()
    timed = [nodes[r["node_name"]] for r in reset if r["node_name"] in nodes and nodes[r["node_name"]].is_timer]
    if timed:  # a reset sleep or event wait waits again (dag/timers.py says how its deadline restarts)
        scope = store.read_scope(cur, run_id, wf)
        timers.rearm(cur, [timers.row(run, node, scope) for node in timed])
    restarted, unstarted = [], []
    for name in sorted(r["node_name"] for r in reset if r["node_name"] in child_nodes):
        below = cur.execute(_CHILD["child_of_node"], {"run_id": run_id, "node_name": name}).fetchone()
        if below is None:
            unstarted.append(name)  # it failed before its child started (a limit): start one now
        elif below["status"] in ("failed", "cancelled"):  # resumed in place: its completed nodes are kept
            restarted.append(_restart(cur, below["id"], requested_by, f"with its parent run {run_id}; ")["run_id"])
    started = store.start_children(cur.connection, run_id, unstarted) if unstarted else []
    step = store.advance_run(cur.connection, run_id)
    detail = why + f"was {run['status']}" + (f"; {len(stale)} unapplied input answer(s) rejected" if stale else "")
    audit.record(cur, run_id, "restart", requested_by=requested_by, detail=detail)
    result = {"run_id": run_id, "reset": [r["node_name"] for r in reset], "enqueued": list(step.enqueue) if step else []}
    return {**result, "child_runs": restarted + started} if restarted or started else result


RECONCILE_BACKOFF_BASE = 5.0  # seconds before the first retry (the sweep's own period), doubling per failure
RECONCILE_BACKOFF_MAX = 300.0


def reconcile_runs(conn: db.Conn, *, limit: int = 100, max_attempts: int | None = None,
                   backoff_base: float = RECONCILE_BACKOFF_BASE, backoff_max: float = RECONCILE_BACKOFF_MAX) -> list[int]:
    """Advance every stalled run once (running with no live node and no pending event, or queued
    by plain SQL and never started); returns their ids.

    Each run is advanced in a savepoint, so one whose step raises does not stop the others (one
    log line, no traceback: the error is deterministic more often than not). Its failures are
    counted on its row (`reconcile_attempts`, `reconcile_next_at`), so a new leader carries on
    the count: it is retried after an exponential backoff and, after `max_attempts` (default
    `dispatch_max_attempts`) failed sweeps, poison-flagged and no longer swept.
    Runs another process holds are skipped this time.
    """
    limit_attempts = max_attempts or config.current().settings.dispatch_max_attempts
    backoff = {"max_attempts": limit_attempts, "backoff_base": backoff_base, "backoff_max": backoff_max}
    repaired: list[int] = []
    with conn.transaction(), conn.cursor(row_factory=dict_row) as cur:
        stalled = cur.execute(_DAG["dag_stalled_runs"], {"limit": limit}).fetchall() + mapping.stalled_runs(cur, limit=limit)
        for row in stalled:
            try:
                with conn.transaction():
                    if row["status"] == "queued":
                        step = store.start_queued_run(conn, row["id"])
                    else:
                        step = store.advance_run(conn, row["id"])
            except psycopg.OperationalError:
                raise
            except Exception as exc:  # noqa: BLE001 - one broken run must not stall the sweep
                _reconcile_failed(cur, row["id"], exc, backoff)
                continue
            if row["reconcile_attempts"]:
                cur.execute(_DAG["dag_reconcile_done"], {"run_id": row["id"]})
            if step is not None:
                why = "was queued and never started" if row["status"] == "queued" else "had no live node and no pending event"
                log.warning("reconcile: run %s %s; %s", row["id"], why, _describe(step))
                repaired.append(row["id"])
    return repaired


def _reconcile_failed(cur: Any, run_id: int, exc: Exception, backoff: dict[str, Any]) -> None:
    error = clean_text(f"{type(exc).__name__}: {exc}")[:2000]
    done = cur.execute(_DAG["dag_reconcile_failed"], {"run_id": run_id, "error": error, **backoff}).fetchone()
    if done is None:
        return
    attempts, limit = done["attempts"], backoff["max_attempts"]
    if done["poisoned_at"] is None:
        log.warning("reconcile: run %s could not be advanced (attempt %d/%d, retry in %.0fs): %s",
                    run_id, attempts, limit, done["retry_in"], error)
        return
    log.error("run %s: reconcile POISONED after %d attempts (left for an operator: cancel or fix it): %s", run_id, attempts, error)


def _describe(step: Any) -> str:
    parts = [f"{k} {v}" for k, v in (("enqueued", step.enqueue), ("skipped", step.skip), ("cancelled", step.cancel)) if v]
    if step.run_status:
        parts.append(f"run {step.run_status}")
    return ", ".join(parts) or "nothing to do"


def run_cancelled(run_id: int, *, conn: db.Conn | None = None) -> bool:
    """True when the run is cancelled (or gone): the cooperative flag a long node may poll."""
    check_id(run_id, what="run id")
    with db.transaction(conn) as c:
        row = c.execute(_DAG["dag_run_state"], {"run_id": run_id}).fetchone()
    return row is None or row["status"] == "cancelled"


_checked: dict[int, tuple[float, bool]] = {}  # run id -> (monotonic time of the last look, cancelled)
CHECK_EVERY = 0.25


def cancelled() -> bool:
    """Inside a DAG node: has its run been cancelled? False outside a node (or for a plain node job).

    Cheap to poll in a loop: the database is asked at most every 0.25 s, and within one invoke a yes is final.
    """
    run_id = _current_run.get()
    if run_id is None:
        return False
    now = time.monotonic()
    seen = _checked.get(run_id)
    if seen is not None and (seen[1] or now - seen[0] < CHECK_EVERY):
        return seen[1]
    value = run_cancelled(run_id)
    _checked[run_id] = (now, value)
    return value


@contextmanager
def running_node(run_id: int | None) -> Iterator[None]:
    """Set the run `cancelled()` asks about, for the duration of one node invoke."""
    token = _current_run.set(run_id)
    _checked.clear()  # each invoke asks afresh (a restarted run is no longer cancelled)
    try:
        yield
    finally:
        _current_run.reset(token)
