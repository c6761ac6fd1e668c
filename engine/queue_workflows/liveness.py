"""The worker's background beat: renew the running job's lease and upsert its heartbeat row.

It runs on its own connection so a long job never starves it. A renewal that finds the job
no longer ours is logged; the worker's guarded terminal mark then discards the late result.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass

import psycopg
from psycopg import sql

from . import db, jobstore, queries
from .queries import JobTable

log = logging.getLogger(__name__)


@dataclass
class CurrentJob:
    table: JobTable
    job_id: int


class LivenessBeat(threading.Thread):
    def __init__(
        self,
        *,
        url: str,
        worker_id: str,
        host_label: str,
        queue: str,
        lock_key_fn: Callable[[], int | None],
        lease_seconds: float,
        renew_seconds: float,
        heartbeat_seconds: float,
        now_fn: Callable[[], float] = time.monotonic,
    ) -> None:
        super().__init__(name=f"liveness-{queue}", daemon=True)
        self.url = url
        self.worker_id = worker_id
        self.host_label = host_label
        self.queue = queue
        self.lock_key_fn = lock_key_fn
        self.lease_seconds = lease_seconds
        self.renew_seconds = renew_seconds
        self.heartbeat_seconds = heartbeat_seconds
        self.now_fn = now_fn
        self.state = "idle"
        self.current: CurrentJob | None = None
        self._wake = threading.Event()
        self._halt = threading.Event()
        self._conn: db.Conn | None = None
        self._next_heartbeat = 0.0
        self._next_renew = 0.0

    def job_started(self, table: JobTable, job_id: int) -> None:
        self.current, self.state = CurrentJob(table, job_id), "busy"
        self._next_renew = self.now_fn() + self.renew_seconds
        self._wake.set()  # recompute the sleep: a renewal may now be due before the next heartbeat

    def job_finished(self) -> None:
        self.current, self.state = None, "idle" if not self._halt.is_set() else "stopping"

    def stopping(self) -> None:
        self.state = "stopping"
        self._next_heartbeat = 0.0
        self._wake.set()

    def stop(self) -> None:
        """Stop beating and remove this worker's heartbeat row."""
        self._halt.set()
        self._wake.set()
        if self.is_alive():
            self.join(timeout=5)
        self._execute(queries.query("delete_heartbeat"), {"worker_id": self.worker_id})
        if self._conn is not None:
            self._conn.close()

    def run(self) -> None:
        while not self._halt.is_set():
            now = self.now_fn()
            if now >= self._next_heartbeat:
                self._heartbeat()
                self._next_heartbeat = now + self.heartbeat_seconds
            job = self.current
            if job is not None and now >= self._next_renew:
                self._renew(job)
                self._next_renew = now + self.renew_seconds
            due = min(self._next_heartbeat, self._next_renew if self.current else self._next_heartbeat)
            self._wake.wait(timeout=max(0.05, due - self.now_fn()))
            self._wake.clear()

    def _heartbeat(self) -> None:
        lock_key = self.lock_key_fn()
        if lock_key is None:
            return
        job = self.current
        self._execute(
            queries.query("upsert_heartbeat"),
            {
                "worker_id": self.worker_id,
                "host_label": self.host_label,
                "queue": self.queue,
                "pid": os.getpid(),
                "lock_key": lock_key,
                "state": self.state,
                "current_job_id": job.job_id if job else None,
            },
        )

    def _renew(self, job: CurrentJob) -> None:
        conn = self._connection()
        if conn is None:
            return
        try:
            still_ours = jobstore.renew_lease(conn, job.table, job.job_id, self.worker_id, self.lease_seconds)
        except psycopg.OperationalError as exc:
            self._drop(exc)
            return
        if not still_ours and self.current is job:
            log.error("job %s was taken away from %s (lease lapsed or reclaimed)", job.job_id, self.worker_id)

    def _execute(self, statement: sql.Composed | sql.SQL, params: dict[str, object]) -> None:
        conn = self._connection()
        if conn is None:
            return
        try:
            conn.execute(statement, params)
        except psycopg.OperationalError as exc:
            self._drop(exc)

    def _connection(self) -> db.Conn | None:
        if self._conn is None or self._conn.closed:
            try:
                self._conn = db.connect(autocommit=True, url=self.url)
            except psycopg.OperationalError as exc:
                log.debug("liveness: database unavailable: %s", exc)
                return None
        return self._conn

    def _drop(self, exc: Exception) -> None:
        log.debug("liveness: connection lost: %s", exc)
        if self._conn is not None:
            self._conn.close()
        self._conn = None
