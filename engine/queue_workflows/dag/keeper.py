"""The orchestrator's DAG keeper: the input listener and the reconcile sweep, on one connection.

Woken by `NOTIFY qw_input` (a submission was inserted) with a `tick` safety poll, it applies
pending input submissions (`inputs.process_inputs`, which also reclaims ones stuck in
processing); every `reconcile_seconds` it runs `control.reconcile_runs`. It rides out database
outages like the dispatch drain.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable

from queue_workflows import db
from queue_workflows.common.listening import run_listening
from queue_workflows.dag import control, inputs

log = logging.getLogger(__name__)


class RunKeeper:
    def __init__(
        self,
        *,
        stop_event: threading.Event | None = None,
        tick: float = 5.0,  # a safety poll only: NOTIFY wakes it, and a reconnect steps at once
        reconcile_seconds: float = 5.0,
        stale_seconds: float = 30.0,
        guard: Callable[[db.Conn], None] | None = None,
    ) -> None:
        self.stop_event = stop_event or threading.Event()
        self.tick = tick
        self.reconcile_seconds = reconcile_seconds
        self.stale_seconds = stale_seconds
        self.guard = guard  # the leader's Term.guard: only the leader applies inputs and reconciles
        self.listener = inputs.default_listener_id()
        self._next_reconcile = 0.0

    def once(self, conn: db.Conn) -> None:
        """Apply every pending submission, then reconcile when due."""
        while inputs.process_inputs(conn, self.listener, stale_seconds=self.stale_seconds) > 0:
            pass
        now = time.monotonic()
        if now >= self._next_reconcile:
            control.reconcile_runs(conn)
            self._next_reconcile = now + self.reconcile_seconds

    def run_forever(self, stop_event: threading.Event | None = None) -> None:
        """Until stopped: woken by LISTEN qw_input, reconciling every `reconcile_seconds`; rides out outages."""
        run_listening(stop_event or self.stop_event, what="dag keeper", channel=inputs.CHANNEL, step=self._step, guard=self.guard)

    def _step(self, conn: db.Conn) -> float:
        self.once(conn)
        return max(0.0, min(self.tick, self._next_reconcile - time.monotonic()))
