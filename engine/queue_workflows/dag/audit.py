"""The run audit trail: who cancelled, restarted or answered a run, and when.

`cancel_run`, `restart_run` and `submit_input` take `requested_by` and append a row of
`workflow_run_actions` (migration 0025) in the same transaction as the change itself, so an
action that is refused or rolled back leaves no trace and one that lands always has its row.
"""

from __future__ import annotations

from typing import Any, Literal

from psycopg.rows import dict_row

from queue_workflows import db
from queue_workflows.common import sqlfile
from queue_workflows.payloads import check_id, check_text

_RUN_ACTIONS = sqlfile.load("queue_workflows.dag", "run_actions.sql")

Action = Literal["cancel", "restart", "input"]
REQUESTED_BY_MAX = 200

__all__ = ["Action", "check_requested_by", "record", "run_actions"]


def check_requested_by(requested_by: str | None) -> None:
    """Refuse, before anything is written, a `requested_by` that is not short plain text."""
    if requested_by is not None:
        check_text(requested_by, what="requested_by", max_chars=REQUESTED_BY_MAX)


def record(cur: Any, run_id: int, action: Action, *, requested_by: str | None, detail: str | None = None,
           node_name: str | None = None) -> None:
    """Append one action to the run's trail, inside the caller's transaction."""
    cur.execute(_RUN_ACTIONS["record_run_action"],
                {"run_id": run_id, "action": action, "node_name": node_name, "requested_by": requested_by, "detail": detail})


def run_actions(run_id: int, *, conn: db.Conn | None = None) -> list[dict[str, Any]]:
    """The run's actions, oldest first: action, node_name, requested_by, detail, at."""
    check_id(run_id, what="run id")
    with db.transaction(conn) as c, c.cursor(row_factory=dict_row) as cur:
        return list(cur.execute(_RUN_ACTIONS["run_actions"], {"run_id": run_id}).fetchall())
