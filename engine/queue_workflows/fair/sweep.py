"""The leader's tenant sweep: tenants with nothing queued leave the claim's walk, missed ones come back.

A claim walks only the queue's active tenants (fair/fair.sql), so its cost follows the tenants
with work, not every tenant ever seen. Enqueues activate a tenant; only this sweep idles one, and
the same pass revives any it idled while a job of its was being queued unseen.
"""

from __future__ import annotations

import threading
from collections.abc import Callable

from psycopg.rows import dict_row

from queue_workflows import config, db
from queue_workflows.common import sqlfile
from queue_workflows.common.listening import run_listening

_FAIR = sqlfile.load("queue_workflows.fair", "fair.sql")


def settle_tenants(conn: db.Conn) -> tuple[int, int]:
    """One pass, in the caller's transaction: how many tenants went idle, and how many came back."""
    with conn.cursor(row_factory=dict_row) as cur:
        row = cur.execute(_FAIR["tenants_settle"]).fetchone()
    assert row is not None
    return int(row["idled"]), int(row["revived"])


class TenantSweep:
    """Every `tenant_sweep_seconds` (QW_TENANT_SWEEP_SECONDS), under the leader's guard."""

    def __init__(self, *, stop_event: threading.Event, guard: Callable[[db.Conn], None] | None = None,
                 interval: float | None = None) -> None:
        self.stop_event = stop_event
        self.guard = guard
        self.interval = interval or config.current().settings.tenant_sweep_seconds

    def _step(self, conn: db.Conn) -> float:
        if self.guard is None:
            with conn.transaction():
                settle_tenants(conn)
        else:
            settle_tenants(conn)
        return self.interval

    def run_forever(self) -> None:
        run_listening(self.stop_event, what="tenant sweep", channel=None, step=self._step, guard=self.guard)
