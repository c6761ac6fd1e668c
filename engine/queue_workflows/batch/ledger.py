"""Where each row of a claimed batch stands: unstarted, running, finished in memory, or stored.

The runner's threads and the liveness beat both read it, so a trip can store what finished
and hand back only what never started, and a row taken from the batch stops the worker
only if its code is running.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from typing import Any

from ..executor import Outcome
from ..jobstore import Statement

Job = dict[str, Any]
Finished = list[tuple[Job, Outcome]]


class BatchLedger:
    def __init__(self, jobs: Sequence[Job], outcome_statements: Callable[[list[Job], list[Outcome | None]], list[Statement]]) -> None:
        self._lock = threading.Lock()
        self._order = [job["id"] for job in jobs]
        self._unstarted = set(self._order)
        self._running: set[int] = set()
        self._finished: dict[int, tuple[Job, Outcome]] = {}  # in memory, not committed yet
        self._gone: set[int] = set()  # stored, or taken from us: no longer this batch's to lease
        self._outcome_statements = outcome_statements
        self.closed = False  # a trip is ending the process: nothing more may start

    def start(self, job_id: int) -> bool:
        """Count the row as running from before its start record: a row taken meanwhile then stops the worker."""
        with self._lock:
            if self.closed or job_id not in self._unstarted:
                return False
            self._unstarted.discard(job_id)
            self._running.add(job_id)
            return True

    def not_ours(self, job_id: int) -> None:
        """Its start record found the row taken from us: it never runs."""
        with self._lock:
            self._running.discard(job_id)
            self._gone.add(job_id)

    def finish(self, job: Job, outcome: Outcome) -> None:
        with self._lock:
            self._running.discard(job["id"])
            if job["id"] not in self._gone:
                self._finished[job["id"]] = (job, outcome)

    def finished(self) -> Finished:
        """Rows finished in memory and not yet stored, in claim order."""
        with self._lock:
            return [self._finished[i] for i in self._order if i in self._finished]

    def stored(self, rows: Finished) -> None:
        with self._lock:
            for job, _ in rows:
                self._finished.pop(job["id"], None)
                self._gone.add(job["id"])

    def unstored_ids(self) -> list[int]:
        """The rows this worker still holds running in the table (what its lease must cover)."""
        with self._lock:
            return [i for i in self._order if i not in self._gone]

    def running_ids(self) -> list[int]:
        with self._lock:
            return [i for i in self._order if i in self._running]

    def taken(self, lost: set[int]) -> set[int]:
        """Of rows found no longer ours, those whose code runs; the others just leave the batch."""
        with self._lock:
            lost = lost - self._gone - self._finished.keys()  # stored meanwhile by our own commit
            self._unstarted -= lost
            self._gone |= lost - self._running
            return lost & self._running

    def close(self) -> tuple[list[Statement], list[int], list[int]]:
        """For a trip: the finished rows' statements, the running rows, the unstarted rows; nothing starts after."""
        with self._lock:
            self.closed = True
            finished = [self._finished[i] for i in self._order if i in self._finished]
            running = [i for i in self._order if i in self._running]
            unstarted = [i for i in self._order if i in self._unstarted]
        statements = self._outcome_statements([j for j, _ in finished], [o for _, o in finished]) if finished else []
        return statements, running, unstarted
