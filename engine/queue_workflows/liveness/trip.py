"""The one function by which a worker stops the job it runs and ends its process.

Whatever tripped (a watchdog, a lost lease, an operator's hard stop), the job's row gets
the one write that trip calls for, in one transaction, and then the process exits with the
trip's code. The job's code is never interrupted: the exit frees its memory and VRAM.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass

import psycopg
from psycopg.rows import dict_row

from .. import queries
from ..exits import EXIT_BUDGET, EXIT_HARD_STOP, EXIT_STALLED
from ..queries import JobTable
from ..session import first_line
from .watchdogs import Trip

log = logging.getLogger(__name__)

# What each trip writes: a watchdog requeues (or, at the cap, fails) the job; a hard stop hands
# it back untouched; a job taken away (77) is not ours to write.
WRITES = {EXIT_BUDGET: "watchdog_trip", EXIT_STALLED: "watchdog_trip", EXIT_HARD_STOP: "release_job"}


@dataclass(frozen=True)
class CurrentJob:
    table: JobTable
    job_id: int


def stop_job(
    job: CurrentJob | None,
    trip: Trip,
    *,
    url: str,
    worker_id: str,
    max_trips: int,
    exit_fn: Callable[[int, str], None],
) -> None:
    outcome = ""
    statement = WRITES.get(trip.code)
    if job is not None and statement is not None:
        params = {
            "job_id": job.job_id,
            "worker_id": worker_id,
            "max_trips": max_trips,
            "error": f"stopped by the worker (exit {trip.code}): {trip.reason}",
        }
        try:
            # A fresh, bounded connection: the worker's own ones may be what is failing.
            with psycopg.connect(url, autocommit=True, row_factory=dict_row, connect_timeout=5,
                                 options="-c statement_timeout=5000") as conn:
                row = conn.execute(queries.query(statement, job.table), params).fetchone()
            if row is None:
                outcome = "; it was no longer ours"
            elif statement == "release_job":
                outcome = "; handed back to the queue"
            else:
                outcome = f"; now {row['status']} (watchdog trip {row['watchdog_trips']} of {max_trips})"
        except Exception as exc:  # noqa: BLE001 - leave anyway; the lease returns the job
            outcome = f"; its outcome was not written ({first_line(exc)}), its lease will return it"
    subject = f"job {job.job_id}" if job is not None else "worker"
    exit_fn(trip.code, f"{subject}: {trip.reason}{outcome}")
