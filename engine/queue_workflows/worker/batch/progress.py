"""A batch's progress, recorded every `PROGRESS_SECONDS` while its rows run, on a connection of its own.

Each record stores the rows that finished (charging them with their outcome) and charges
the rows that have been running for at least that long, in one round trip that does not
wait for the disk. So a row that runs longer than twice that is charged before it can
crash its worker, and a crash loses at most that long of finished rows, which go back
uncharged (and suspect: see the reclaim) instead of failing. A row charged while running
has its outcome recorded as soon as it finishes, before any other row starts (the worker
calls `settle`), so the only charged rows a crash can leave are running ones.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable

import psycopg

from queue_workflows import db
from queue_workflows.common import sqlfile
from queue_workflows.common.text import first_line
from queue_workflows.worker.batch.ledger import BatchLedger

_BATCH = sqlfile.load("queue_workflows.worker.batch", "batch.sql")

log = logging.getLogger(__name__)

PROGRESS_SECONDS = 0.05


class ProgressWriter(threading.Thread):
    def __init__(self, *, url: str, current: Callable[[], BatchLedger | None], write_lock: threading.RLock,
                 interval: float = PROGRESS_SECONDS) -> None:
        super().__init__(name="batch-progress", daemon=True)
        self.url = url
        self.current = current
        self.write_lock = write_lock  # an RLock: settle() records under it
        self.interval = interval
        self._halt = threading.Event()
        self._conn: db.Conn | None = None
        self._failing = False

    def run(self) -> None:
        while not self._halt.wait(self.interval):
            ledger = self.current()
            if ledger is None or time.monotonic() - ledger.began < self.interval:
                continue  # a batch done within one interval is stored by its own commit: nothing to record yet
            try:
                self.record(ledger, running_for=self.interval)
                self._failing = False
            except psycopg.Error as exc:  # the next tick tries again; until then a crash re-runs more
                if not self._failing:
                    log.warning("batch progress not recorded (%s); retrying", first_line(exc))
                self._failing = True
                self._close()

    def settle(self, ledger: BatchLedger) -> None:
        """Record now if a row on record as running has finished, so a crash blames only running rows.

        A record in flight may be charging a row that has just finished: then wait for it, and record after.
        """
        if ledger.charged_and_finished(or_charging=True):
            with self.write_lock:
                if ledger.charged_and_finished():
                    self.record(ledger, running_for=self.interval)

    def record(self, ledger: BatchLedger, *, running_for: float) -> None:
        """Record now (any thread); a failed record leaves the ledger as it was, for the next one."""
        with self.write_lock:
            progress = ledger.progress(running_for=running_for)
            if not progress or ledger.closed:
                ledger.recorded(None)
                return
            try:
                if self._conn is None or self._conn.closed:
                    self._conn = db.connect(autocommit=True, url=self.url)
                db.one_round_trip(self._conn, [(_BATCH.sql("async_commit"), {}), *ledger.statements(progress)])
            except BaseException as exc:
                ledger.recorded(None)
                if isinstance(exc, psycopg.OperationalError):
                    self._close()
                raise
            ledger.recorded(progress)

    def stop(self) -> None:
        self._halt.set()
        if self.is_alive():
            self.join(timeout=5)
        self._close()

    def _close(self) -> None:
        conn, self._conn = self._conn, None
        if conn is not None:
            try:
                conn.close()
            except psycopg.Error:
                pass
