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

import psycopg

from .. import config, db
from ..backoff import Backoff
from . import control, inputs

log = logging.getLogger(__name__)


class RunKeeper:
    def __init__(
        self,
        *,
        stop_event: threading.Event | None = None,
        tick: float = 1.0,
        reconcile_seconds: float = 5.0,
        stale_seconds: float = 30.0,
    ) -> None:
        self.stop_event = stop_event or threading.Event()
        self.tick = tick
        self.reconcile_seconds = reconcile_seconds
        self.stale_seconds = stale_seconds
        self.listener = inputs.default_listener_id()
        self._next_reconcile = 0.0
        self._backoff = Backoff(initial=0.2, maximum=5.0)

    def once(self, conn: db.Conn) -> None:
        """Apply every pending submission, then reconcile when due."""
        while inputs.process_inputs(conn, self.listener, stale_seconds=self.stale_seconds) > 0:
            pass
        now = time.monotonic()
        if now >= self._next_reconcile:
            control.reconcile_runs(conn)
            self._next_reconcile = now + self.reconcile_seconds

    def run_forever(self, stop_event: threading.Event | None = None) -> None:
        stop = stop_event or self.stop_event
        url = config.current().database_url()
        conn: db.Conn | None = None
        while not stop.is_set():
            try:
                if conn is None or conn.closed:
                    conn = db.connect(autocommit=True, url=url)
                    conn.execute(f"LISTEN {inputs.CHANNEL}")
                self.once(conn)
                self._backoff.reset()
                wait = max(0.0, min(self.tick, self._next_reconcile - time.monotonic()))
                for _ in conn.notifies(timeout=wait, stop_after=1):
                    pass
            except Exception as exc:  # noqa: BLE001 - the keeper outlives any error
                if conn is not None:
                    conn.close()
                conn = None
                delay = self._backoff.next_delay()
                if isinstance(exc, psycopg.OperationalError):
                    log.warning("dag keeper: database unavailable (%s); retrying in %.2fs", str(exc).splitlines()[0] if str(exc) else exc, delay)
                else:
                    log.exception("dag keeper failed; retrying in %.2fs", delay)
                stop.wait(delay)
        if conn is not None:
            conn.close()
