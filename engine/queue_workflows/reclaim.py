"""Recovery: the one path by which an orphaned running job goes back to `queued`."""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable

import psycopg

from . import config, db, jobstore
from .backoff import Backoff
from .jobstore import Row
from .node_queue import INGEST_TABLE, NODE_TABLE

log = logging.getLogger(__name__)


def reclaim_orphans(conn: db.Conn | None = None) -> list[Row]:
    """Requeue (or, with attempts spent, fail) running jobs whose worker session is gone or whose lease lapsed."""
    grace = config.current().settings.lease_seconds
    reclaimed: list[Row] = []
    with db.transaction(conn) as c:
        for table in (NODE_TABLE, INGEST_TABLE):
            reclaimed.extend(jobstore.reclaim_orphans(c, table, session_grace_seconds=grace))
    for row in reclaimed:
        log.warning(
            "reclaimed job %s on %r from %s (attempt %s) -> %s",
            row["id"], row["queue"], row["lost_by"], row["attempts"], row["status"],
        )
    return reclaimed


class ReclaimLoop:
    """Runs `reclaim_orphans` every `reclaim_interval_seconds` until stopped, riding out outages."""

    def __init__(
        self,
        *,
        stop_event: threading.Event,
        interval: float | None = None,
        sleep_fn: Callable[[float], None] | None = None,
    ) -> None:
        self.stop_event = stop_event
        self.interval = interval or config.current().settings.reclaim_interval_seconds
        self.sleep_fn = sleep_fn or stop_event.wait
        self.backoff = Backoff(initial=0.2, maximum=5.0)
        self.total = 0

    def run_forever(self) -> None:
        url = config.current().database_url()
        conn: db.Conn | None = None
        while not self.stop_event.is_set():
            try:
                if conn is None or conn.closed:
                    conn = db.connect(autocommit=True, url=url)
                self.total += len(reclaim_orphans(conn))
                self.backoff.reset()
                self.sleep_fn(self.interval)
            except psycopg.OperationalError as exc:
                if conn is not None:
                    conn.close()
                conn = None
                delay = self.backoff.next_delay()
                log.warning("reclaim: database unavailable (%s); retrying in %.2fs", str(exc).strip().splitlines()[0] if str(exc).strip() else exc, delay)
                self.sleep_fn(delay)
        if conn is not None:
            conn.close()


