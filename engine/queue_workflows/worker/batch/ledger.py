"""Where each row of a claimed batch stands: unstarted, running, finished in memory, or stored.

The runner's threads, the progress writer and the liveness beat all read it: the writer
records which rows started (charging them) and stores what finished, a trip does the same
and hands back only what never started, and a row taken from the batch stops the worker
only if its code is running.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from queue_workflows.jobrow import Job, JobStatus
from queue_workflows.jobstore import Statement
from queue_workflows.worker.executor import Outcome
from queue_workflows.worker.liveness.watchdogs import Timeout

Finished = list[tuple[Job, Outcome]]


@dataclass(frozen=True)
class Progress:
    """What the database does not know yet: rows started but not charged, and rows finished but not stored."""

    uncharged: list[int]
    finished: Finished

    def __bool__(self) -> bool:
        return bool(self.uncharged or self.finished)


class BatchLedger:
    def __init__(self, jobs: Sequence[Job], outcome_statements: Callable[[list[Job], list[Outcome | None]], list[Statement]],
                 charge_statement: Callable[[list[int]], Statement]) -> None:
        self._lock = threading.Lock()
        self._order = [job.id for job in jobs]
        self._unstarted = set(self._order)
        self._running: dict[int, float] = {}  # when each started (monotonic)
        self._timeouts: dict[int, tuple[float, Timeout]] = {}  # a running row's own deadline (monotonic), in a threads batch
        self._charged: set[int] = set()  # started, and known so to the database
        self._charging: set[int] = set()  # running rows a record in flight is charging
        self._finished: dict[int, tuple[Job, Outcome]] = {}  # in memory, not committed yet
        self._gone: set[int] = set()  # stored, or taken from us: no longer this batch's to lease
        self._outcome_statements = outcome_statements
        self._charge_statement = charge_statement
        self.closed = False  # a trip is ending the process: nothing more may start
        self.began = time.monotonic()

    def start(self, job_id: int) -> bool:
        """Count the row as running from before any record of it: a row taken meanwhile then stops the worker."""
        with self._lock:
            if self.closed or job_id not in self._unstarted:
                return False
            self._unstarted.discard(job_id)
            self._running[job_id] = time.monotonic()
            return True

    def arm(self, timeout: Timeout, now: float) -> None:
        """A started row's node timeout, watched by the beat's guard (`overdue`) while the row runs."""
        with self._lock:
            self._timeouts[timeout.job_id] = (now + timeout.seconds, timeout)

    def overdue(self, now: float) -> Timeout | None:
        """The timeout of a row still running past its deadline, if any."""
        with self._lock:
            for job_id, (deadline, timeout) in self._timeouts.items():
                if now >= deadline and job_id in self._running:
                    return timeout
            return None

    def not_ours(self, job_id: int) -> None:
        """Its start record found the row taken from us: it never runs."""
        with self._lock:
            self._running.pop(job_id, None)
            self._gone.add(job_id)

    def finish(self, job: Job, outcome: Outcome) -> None:
        with self._lock:
            self._running.pop(job.id, None)
            if job.id not in self._gone:
                self._finished[job.id] = (job, outcome)

    def charged_and_finished(self, *, or_charging: bool = False) -> bool:
        """Whether a row on record (or, with `or_charging`, being put on record) as running has finished unrecorded."""
        with self._lock:
            charged = self._charged | self._charging if or_charging else self._charged
            return any(i in self._finished for i in charged)

    def progress(self, *, running_for: float = 0.0) -> Progress:
        """What to record: finished rows (charged with their outcome), and rows running for at least `running_for` s.

        Charging only rows that have run a while keeps a flood of short rows from having to
        record each one's outcome the moment it finishes (see `charged_and_finished`).
        """
        with self._lock:
            since = time.monotonic() - running_for
            running = [i for i in self._order if self._running.get(i, since + 1) <= since and i not in self._charged]
            self._charging = set(running)
            finished = [i for i in self._order if i in self._finished and i not in self._charged]
            return Progress(sorted({*running, *finished}), [self._finished[i] for i in self._order if i in self._finished])

    def recorded(self, progress: Progress | None) -> None:
        """The record committed (None: it failed, and nothing changed)."""
        with self._lock:
            self._charging = set()
            if progress is None:
                return
            self._charged.update(progress.uncharged)
            for job, _ in progress.finished:
                self._finished.pop(job.id, None)
                self._gone.add(job.id)

    def statements(self, progress: Progress) -> list[Statement]:
        """Charge the started rows first (a failure's retry-or-fail decision counts that attempt); a success charges itself."""
        succeeded = {job.id for job, outcome in progress.finished if outcome.status == JobStatus.COMPLETED}
        charge = [i for i in progress.uncharged if i not in succeeded]
        statements = [self._charge_statement(charge)] if charge else []
        if progress.finished:
            statements += self._outcome_statements([j for j, _ in progress.finished], [o for _, o in progress.finished])
        return statements

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
            self._gone |= lost - self._running.keys()
            return lost & self._running.keys()

    def close(self) -> tuple[list[Statement], list[int], list[int]]:
        """For a trip: the statements recording what started and finished, the running rows, the unstarted rows.

        Nothing starts after it.
        """
        with self._lock:
            self.closed = True
            running = [i for i in self._order if i in self._running]
            unstarted = [i for i in self._order if i in self._unstarted]
        return self.statements(self.progress()), running, unstarted
