"""The one function by which a worker stops the job it runs and ends its process.

Whatever tripped (a watchdog, a lost lease, an operator's hard stop), the job's row gets
the one write that trip calls for, in one transaction, and then the process exits with the
trip's code. The job's code is never interrupted: the exit frees its memory and VRAM.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol

import psycopg
from psycopg.rows import dict_row

from queue_workflows.common import sqlfile
from queue_workflows.common.text import first_line
from queue_workflows.db_network import network_timeouts
from queue_workflows.queries import JobTable
from queue_workflows.worker import exit_log
from queue_workflows.worker.exits import EXIT_BUDGET, EXIT_DEVICE_ERROR, EXIT_HARD_STOP, EXIT_STALLED, kill_job_processes
from queue_workflows.worker.liveness.watchdogs import Timeout, Trip

_CONTROL = sqlfile.load("queue_workflows.control", "control.sql")
_JOBS = sqlfile.load("queue_workflows", "jobs.sql")

log = logging.getLogger(__name__)

# What each trip writes: a watchdog or a GPU device error requeues (or, at the cap, fails) the job; a hard stop hands
# it back untouched; a job taken away (77) is not ours to write.
WRITES = {EXIT_BUDGET: "watchdog_trip", EXIT_STALLED: "watchdog_trip", EXIT_DEVICE_ERROR: "watchdog_trip", EXIT_HARD_STOP: "release_job"}
# Exits after which a gpu worker's device may be left in an error state.
DEVICE_SUSPECT_EXITS = frozenset({EXIT_BUDGET, EXIT_STALLED, EXIT_HARD_STOP, EXIT_DEVICE_ERROR})


class BatchRows(Protocol):
    """What a batch worker tells the beat about its rows (queue_workflows.worker.batch.ledger)."""

    def unstored_ids(self) -> list[int]: ...
    def overdue(self, now: float) -> Timeout | None: ...
    def taken(self, lost: set[int]) -> set[int]: ...
    def close(self) -> tuple[list[tuple[Any, Any]], list[int], list[int]]: ...


@dataclass(frozen=True)
class CurrentJob:
    """The job the worker runs; a batch worker's other claimed rows ride along in `batch`, tracked by `rows`."""

    table: JobTable
    job_id: int
    batch: tuple[int, ...] = ()
    rows: BatchRows | None = None

    @property
    def ids(self) -> list[int]:
        """Every row this claim still holds running (a batch's stored rows have left it)."""
        if self.rows is not None:
            return self.rows.unstored_ids()
        return [self.job_id, *(i for i in self.batch if i != self.job_id)]

    def taken(self, lost: set[int]) -> set[int]:
        """Of the rows found no longer ours, those that make running on a duplicate: a batch's unstarted ones do not."""
        return self.rows.taken(lost) if self.rows is not None else lost

    def same_claim(self, other: CurrentJob) -> bool:
        return self.rows is other.rows if self.rows is not None else set(self.ids) == set(other.ids)


def stop_job(
    job: CurrentJob | None,
    trip: Trip,
    *,
    url: str,
    worker_id: str,
    max_trips: int,
    exit_fn: Callable[[int, str], None],
    device_check: tuple[str, str] | None = None,
    origin: tuple[str, str] | None = None,
) -> None:
    """Write what `trip` calls for, in one transaction, then exit with its code.

    `device_check` (host, queue) flags a gpu worker so its next process probes the device first;
    `origin` (host, queue) records the exit in `qw_worker_exits`, in the same transaction.
    """
    subject = f"job {job.job_id}" if job is not None else "worker"
    try:
        kill_job_processes()  # before the job is handed on, so nothing of this attempt runs beside the next
    except Exception as exc:  # noqa: BLE001 - the exit tries again
        log.warning("the job's processes were not ended before its write: %s", first_line(exc))
    statement = ("node_timeout" if trip.timeout is not None else WRITES.get(trip.code)) if job is not None else None
    writes = statement is not None or device_check is not None or (job is not None and (job.rows is not None or len(job.ids) > 1))
    # The exit is recorded beside a write the trip makes anyway, or when no job is held; a job given up
    # with nothing to write leaves at once, since its lease may lapse while a connection is tried.
    origin = origin if writes or job is None else None
    outcome = ""
    if writes or origin is not None:
        try:
            outcome = _write(job, trip, statement, url=url, worker_id=worker_id, max_trips=max_trips, device_check=device_check, origin=origin)
        except Exception as exc:  # noqa: BLE001 - leave anyway; the lease returns the job
            outcome = f"; its outcome was not written ({first_line(exc)}), its lease will return it"
    exit_fn(trip.code, f"{subject}: {trip.reason}{outcome}")


def _write(
    job: CurrentJob | None, trip: Trip, statement: str | None, *, url: str, worker_id: str, max_trips: int,
    device_check: tuple[str, str] | None, origin: tuple[str, str] | None = None,
) -> str:
    # A fresh, bounded connection: the worker's own ones may be what is failing.
    with psycopg.connect(url, autocommit=True, row_factory=dict_row, options="-c statement_timeout=5000",
                         **network_timeouts(url, 5.0)) as conn, conn.transaction():
        if device_check is not None:
            conn.execute(_CONTROL.sql("set_device_check"), {"host_label": device_check[0], "queue": device_check[1], "pending": True})
        if origin is not None:
            exit_log.record(conn, worker_id=worker_id, host_label=origin[0], queue=origin[1], code=trip.code, reason=trip.reason,
                            job_id=job.job_id if job is not None else None)
        if job is None:
            return ""
        if job.rows is not None:
            return _write_batch(conn, job, job.rows, trip, statement, worker_id=worker_id, max_trips=max_trips)
        others = job.ids[1:]
        if others:  # a batch's other rows: handed back uncharged (rows no longer ours are left alone)
            conn.execute(_JOBS.sql("release_job", job.table), {"ids": others, "worker_id": worker_id})
        if statement is None:
            return f"; {len(others)} other row(s) of its batch handed back" if others else ""
        if statement == "node_timeout" and trip.timeout is not None:
            return _write_timeout(conn, job.table, trip.timeout, worker_id=worker_id)
        params = {"job_id": job.job_id, "ids": [job.job_id], "worker_id": worker_id, "max_trips": max_trips,
                  "error": f"stopped by the worker (exit {trip.code}): {trip.reason}"}
        row = conn.execute(_JOBS.sql("release_job" if statement == "release_job" else "watchdog_trip", job.table), params).fetchone()
    if row is None:
        return "; it was no longer ours"
    if statement == "release_job":
        return "; handed back to the queue"
    return f"; now {row['status']} (watchdog trip {row['watchdog_trips']} of {max_trips})"


def _write_batch(
    conn: psycopg.Connection[Any], job: CurrentJob, rows: BatchRows, trip: Trip, statement: str | None, *, worker_id: str, max_trips: int,
) -> str:
    """Store the rows finished in memory, hand back the unstarted ones uncharged, then write the trip for the running ones.

    A job taken away (77) leaves its running rows to whoever took them: the release only matches rows still ours.
    """
    finished, running, unstarted = rows.close()
    try:
        with conn.transaction():
            for query, params in finished:
                conn.execute(query, params)
    except psycopg.DatabaseError as exc:  # the rest still goes back; these rows' lease returns them
        log.error("job %s: its batch's finished rows could not be stored (%s)", job.job_id, first_line(exc))
        finished = []
    release = _JOBS.sql("release_job", job.table)
    if unstarted:
        conn.execute(release, {"ids": unstarted, "worker_id": worker_id})
    error = f"stopped by the worker (exit {trip.code}): {trip.reason}"
    timed_out = ""
    if statement == "node_timeout" and trip.timeout is not None:
        statement = "release_job"  # a threads batch's other running rows did not time out: handed back uncharged
        if trip.timeout.job_id in running:  # else it finished meanwhile, and is stored with the rest
            running.remove(trip.timeout.job_id)
            timed_out = f"; row {trip.timeout.job_id}{_write_timeout(conn, job.table, trip.timeout, worker_id=worker_id)}"
    if statement == "watchdog_trip":
        for job_id in running:
            params = {"job_id": job_id, "worker_id": worker_id, "max_trips": max_trips, "error": error}
            conn.execute(_JOBS.sql("watchdog_trip", job.table), params)
    elif running:
        conn.execute(release, {"ids": running, "worker_id": worker_id})
    return (f"; batch: {len(finished)} finished write(s) stored, {len(unstarted)} unstarted row(s) handed back, "
            f"running row(s) {running} {'tripped' if statement == 'watchdog_trip' else 'handed back if still ours'}{timed_out}")


def _write_timeout(conn: psycopg.Connection[Any], table: JobTable, timeout: Timeout, *, worker_id: str) -> str:
    """A node's own timeout is a failed attempt: retried after the delay its policy chose at the start, else failed."""
    job_id = timeout.job_id
    if timeout.retry_in is not None:
        params = {"job_id": job_id, "worker_id": worker_id, "error": timeout.error, "delay_seconds": timeout.retry_in}
        if conn.execute(_JOBS.sql("retry_job", table), params).fetchone() is not None:
            return f"; now scheduled (timeout, retry in {timeout.retry_in:.1f}s)"
    row = conn.execute(_JOBS.sql("mark_failed", table), {"job_id": job_id, "worker_id": worker_id, "result": None, "error": timeout.error}).fetchone()
    return "; it was no longer ours" if row is None else "; now failed (timeout)"
