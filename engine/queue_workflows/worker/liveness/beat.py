"""The worker's background beat: everything liveness needs while the main thread runs a job.

It holds the worker's lock on a second connection, reopens either of the worker's connections
within about a second when the server drops one, renews the running job's lease, upserts the
heartbeat row, and ends the process (exit 77) when the job is taken away or its lease can no
longer be kept. It never dies of an error: every failure is logged and retried with backoff.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from collections.abc import Callable
from contextlib import AbstractContextManager
from dataclasses import replace
from typing import Any

import psycopg
from psycopg import sql

from queue_workflows import db, jobstore
from queue_workflows.common import sqlfile
from queue_workflows.common.backoff import Backoff
from queue_workflows.common.health_stamp import HealthStamp
from queue_workflows.common.text import first_line
from queue_workflows.control.api import control_for
from queue_workflows.control.device import check_device_if_pending
from queue_workflows.control.switch import WorkerSwitch
from queue_workflows.control.throttle import Throttle, current_probe
from queue_workflows.queries import JobTable
from queue_workflows.worker.exits import EXIT_BUDGET, EXIT_HARD_STOP, EXIT_JOB_TAKEN
from queue_workflows.worker.liveness.config import BeatConfig
from queue_workflows.worker.liveness.fence import CommitFence
from queue_workflows.worker.liveness.pacing import BeatPacer
from queue_workflows.worker.liveness.revocations import EarlyRevocations
from queue_workflows.worker.liveness.trip import DEVICE_SUSPECT_EXITS, BatchRows, CurrentJob, stop_job
from queue_workflows.worker.liveness.watchdogs import JobWatch, Timeout, Trip
from queue_workflows.worker.session import WorkerSession, hold_worker_lock

_WORKER = sqlfile.load("queue_workflows.worker", "worker.sql")

log = logging.getLogger(__name__)

NO_GPU_FIELDS = {"loaded_models": [], "swapping": False, "vram_total_gb": None, "vram_free_gb": None, "gpu_devices": None}
REVOKED_CHANNEL = "qw_job_revoked"
CONTROL_CHANNEL = "qw_worker_control"


class LivenessBeat(threading.Thread):
    def __init__(
        self,
        config: BeatConfig,
        *,
        url: str,
        session: WorkerSession,
        switch: WorkerSwitch | None = None,
        watch: JobWatch | None = None,
        throttle: Throttle | None = None,
    ) -> None:
        """`config` says who the beat speaks for and how often; the rest are the worker's parts it shares."""
        super().__init__(name=f"liveness-{config.queue}", daemon=True)
        self.config = config
        self.url = url
        self.session = session
        # Read as plain attributes by the beat's loop; a test may still swap `exit_fn` on a built beat.
        self.worker_id, self.host_label, self.queue = config.worker_id, config.host_label, config.queue
        self.lease_seconds, self.renew_seconds, self.heartbeat_seconds = config.lease_seconds, config.renew_seconds, config.heartbeat_seconds
        self.check_seconds, self.lease_margin, self.memory_check_seconds = config.check_seconds, config.lease_margin, config.memory_check_seconds
        self.now_fn, self.exit_fn, self.max_trips = config.now_fn, config.exit_fn, config.max_trips
        self.switch = switch or WorkerSwitch(config.host_label, config.queue)
        self.watch = watch or JobWatch(stall_seconds=float("inf"), now_fn=config.now_fn)
        self.throttle = throttle
        self._next_memory_check = 0.0
        self.state = "idle"
        self.backoff = Backoff(initial=0.05, maximum=1.0)
        self._job: CurrentJob | None = None
        self._returned = False  # the job's code returned; its outcome is not committed yet
        self._job_lock = threading.Lock()
        self.fence = CommitFence()
        self._exiting = False  # a trip is writing its outcome: nothing else may act for the worker now
        self._lease_deadline = self._job_since = float("inf")  # _job_since: when the running job's claim went out
        self._next_renew = float("inf")
        self._next_heartbeat = 0.0
        self._next_control_check = 0.0
        self._lost_at: float | None = None
        self._early_revocations = EarlyRevocations(self.lease_seconds)  # heard between a claim's commit and its start
        self._conn: db.Conn | None = None
        self._halt = threading.Event()
        self._armed = threading.Event()  # a job runs (or the beat stops): the guard has something to watch
        self.pacer = BeatPacer(config.check_seconds, self._halt)
        # A gpu worker's warm models, whether it is swapping, and its VRAM, shown with each heartbeat.
        self.gpu_fields: Callable[[], dict[str, Any]] = lambda: dict(NO_GPU_FIELDS)
        self.health = HealthStamp(None)  # the worker sets its QW_HEALTH_FILE

    # -- called from the worker's main thread ----------------------------------------------

    def job_started(
        self, table: JobTable, job_id: int, budget_seconds: float = float("inf"), batch: tuple[int, ...] = (), rows: BatchRows | None = None,
        timeout: Timeout | None = None, claimed_at: float | None = None,
    ) -> None:
        """A claim's rows are running from here: `job_id`, and a batch worker's other rows in `batch` (or `rows`).

        The lease counts from `claimed_at` (by `now_fn`, taken before the claim was sent): a claim whose
        reply came back too late to keep its lease (a frozen process, a partition) stops here, unrun.
        """
        now = self.now_fn()
        start = now if claimed_at is None else min(now, claimed_at)
        with self._job_lock:
            self._job = job = CurrentJob(table, job_id, batch, rows)
            self._returned = False
            self._lease_deadline, self._job_since = start + self.lease_seconds, start
            self._next_renew = start + self.renew_seconds
            self.watch.start(job_id, budget_seconds, timeout)
        self.state = "busy"
        self._armed.set()
        self.pacer.job_started()  # a poke only out of an idle beat's long sleep: one per job cost a third of no-op throughput
        if self.lease_lapsed():
            self._job_taken(job, f"its claim took {now - start:.1f}s to come back, past its {self.lease_seconds:g}s lease")

    def models_changed(self) -> None:
        """A gpu worker loaded or unloaded a model: publish its warm models now, for the others' routing."""
        self._next_heartbeat = 0.0
        self.pacer.poke()

    def job_advanced(self, job_id: int, budget_seconds: float = float("inf"), timeout: Timeout | None = None) -> None:
        """The next row of the running batch starts: the watchdogs follow it; the lease stays the batch's."""
        with self._job_lock:
            if self._job is not None:
                self._job = replace(self._job, job_id=job_id)
                self.watch.start(job_id, budget_seconds, timeout)

    def committing(self) -> AbstractContextManager[None]:
        """Hold every trip off across a commit that stores outcomes or claims (see fence.py).

        Inside it, after the commit: `job_finished()` for what it stored, `job_started()` for what it claimed.
        """
        return self.fence.committing()

    def job_returned(self) -> None:
        """The job's code returned: its watchdogs stand down, and a hard stop waits for its outcome's commit.

        Past its lease (the process was frozen), the job may run elsewhere by now: stop, storing nothing.
        """
        if (job := self._job) is not None and self.lease_lapsed():
            self._job_taken(job, f"its lease of {self.lease_seconds:g}s lapsed before its code returned")
        with self._job_lock:
            self._returned = self._job is not None
            self.watch.finish()

    def lease_lapsed(self) -> bool:
        """The running job's lease is (nearly) spent by this process's clock: someone else may hold it now."""
        return self._job is not None and self.now_fn() >= self._lease_deadline - self.lease_margin

    @property
    def job_returned_uncommitted(self) -> bool:
        return self._returned

    def job_finished(self) -> None:
        """The job's outcome is stored (or about to be): from here on, losing it is the worker's own doing."""
        with self._job_lock:
            self._job = None
            self._returned = False
            self.watch.finish()
        self.state = "stopping" if self.state == "stopping" else "idle"
        if self.switch.parked:
            self._next_heartbeat = 0.0  # a worker parked while busy shows 'parked' as soon as its job ends

    def stopping(self) -> None:
        self.state = "stopping"
        self._next_heartbeat = 0.0
        self.pacer.poke()

    def trip_current_job(self, trip: Trip) -> None:
        """Stop the running job from the main thread's side (a GPU device error): same one path."""
        self._trip(self._job, trip)

    def stop(self) -> None:
        """Stop beating, remove this worker's heartbeat row and close the connection."""
        self._halt.set()
        self._armed.set()
        self.pacer.poke()
        if self.is_alive():
            self.join(timeout=5)
        conn = self._conn
        if conn is not None and not conn.closed:
            try:
                conn.execute(_WORKER.sql("delete_heartbeat"), {"worker_id": self.worker_id})
            except psycopg.Error as exc:
                log.debug("liveness: heartbeat row not removed: %s", first_line(exc))
            conn.close()
        self.pacer.close()

    # -- the thread ------------------------------------------------------------------------

    def run(self) -> None:
        # The guard runs apart, so a statement stuck in the network cannot delay a trip or keep us unleased.
        threading.Thread(target=self._guard, name=f"job-guard-{self.queue}", daemon=True).start()
        while not self._halt.is_set():
            try:
                spoke = self._tick()
                self.backoff.reset()
                if spoke:
                    continue  # its statements may have taken a NOTIFY into psycopg's backlog: look before sleeping
                # The session's socket only once the job has run a check interval: its own replies woke the beat dozens of times per short job.
                running_for = self.now_fn() - self._job_since if self._job is not None else -1.0
                self.pacer.sleep(max(0.0, self._next_due() - self.now_fn()),
                                 (self._conn, self.session.current_connection() if running_for >= self.check_seconds else None))
            except Exception as exc:  # noqa: BLE001 - the beat must outlive any error
                try:
                    self._failed(exc)
                finally:
                    self._halt.wait(self.backoff.next_delay())

    def _guard(self) -> None:
        """The lease deadline and the watchdogs, checked apart from any database call."""
        while not self._halt.wait(0.05):
            job = self._job
            if job is None:
                self._armed.clear()  # then look again: a job_started() after this look sets it anew
                if self._job is None and not self._halt.is_set():
                    self._armed.wait()  # idle: no wake-ups until a job starts
                continue
            if self._returned:
                continue
            if self.lease_lapsed():
                self._job_taken(job, f"its lease could not be renewed within {self.lease_seconds:g}s")
            elif (trip := self.watch.check()) is not None:
                self._trip(job, trip)
            elif job.rows is not None and (late := job.rows.overdue(self.now_fn())) is not None:  # a threads batch's row
                self._trip(job, Trip(EXIT_BUDGET, f"node timeout of {late.seconds:g}s spent (row {late.job_id})", late))

    def _tick(self) -> bool:
        """One round of chores; True when it sent a statement on its connection."""
        conn = self._anchor()
        revoked, control_changed = self._notifications(conn)
        now = self.now_fn()
        spoke = False
        if control_changed or now >= self._next_control_check:  # the poll covers a lost NOTIFY
            self._check_control(conn)
            self._next_control_check = now + self.heartbeat_seconds
            spoke = True
        if self.throttle is not None and now >= self._next_memory_check:
            self._next_memory_check = now + self.memory_check_seconds
            self._check_memory(self.throttle)
        job = self._job
        revoked = self._early_revocations.merge(revoked, job.ids if job is not None else None, now)
        if job is not None and (revoked.intersection(job.ids) or now >= self._next_renew):
            self._renew(conn, job, now)
            spoke = True
        if now >= self._next_heartbeat:
            self._heartbeat(conn, job)
            self._next_heartbeat = now + self.heartbeat_seconds
            spoke = True
        self.session.repair_if_idle()
        return spoke

    def _anchor(self) -> db.Conn:
        """This thread's connection, holding the worker's lock and listening for revocations."""
        if self._conn is not None and not self._conn.closed:
            return self._conn
        key = self.session.lock_key
        if key is None:
            raise RuntimeError("the worker session has no lock key yet")
        conn = db.connect(autocommit=True, url=self.url)
        try:
            # A renewal stuck behind a lock must fail and retry, not sit past the lease.
            conn.execute("SELECT set_config('statement_timeout', %s, false)", (f"{max(1, int(self.renew_seconds * 1000))}ms",))
            hold_worker_lock(conn, key)
            for channel in (REVOKED_CHANNEL, CONTROL_CHANNEL):
                conn.execute(sql.SQL("LISTEN {}").format(sql.Identifier(channel)))
        except BaseException:
            conn.close()
            raise
        self._conn = conn
        if self._lost_at is not None:
            log.warning("liveness connection restored after %.2fs (lock %s)", self.now_fn() - self._lost_at, key)
            self._lost_at = None
        with self._job_lock:
            self._next_renew = min(self._next_renew, self.now_fn())  # after a gap, check the job at once
        return conn

    def _notifications(self, conn: db.Conn) -> tuple[set[int], bool]:
        """Job ids revoked from this worker, and whether its ON/OFF row changed."""
        revoked, control_changed = set(), False
        for notice in conn.notifies(timeout=0):
            if notice.channel == CONTROL_CHANNEL:
                control_changed = control_changed or notice.payload == self.switch.payload
                continue
            job_id, _, worker_id = notice.payload.partition(":")
            if worker_id == self.worker_id and job_id.isdigit():
                revoked.add(int(job_id))
        return revoked, control_changed

    def _check_memory(self, throttle: Throttle) -> None:
        try:
            readings = current_probe(gpu=self.queue == "gpu" and self.config.gpu_memory_throttle)()  # nor a cpu worker by a full GPU
        except Exception as exc:  # noqa: BLE001 - a broken probe must not stop the beat
            log.warning("memory probe failed (%s); throttle state unchanged", first_line(exc))
            return
        if throttle.update(readings):
            self._next_heartbeat = 0.0  # show the new state at once
            self.switch.changed.set()

    def _check_control(self, conn: db.Conn) -> None:
        row = control_for(self.host_label, self.queue, conn)
        was_parked = self.switch.parked
        hard_stop = self.switch.apply(row)
        if self.queue == "gpu" and self._job is None and not self._exiting:
            check_device_if_pending(conn, self.switch, row)
        if hard_stop:
            self._trip(None, Trip(EXIT_HARD_STOP, "turned OFF by the operator (hard stop)"), whatever_runs=True)
        if self.switch.parked != was_parked:
            self._next_heartbeat = 0.0  # show parked / claiming again at once

    def _renew(self, conn: db.Conn, job: CurrentJob, now: float) -> None:
        ids = job.ids
        held = jobstore.renew_lease(conn, job.table, ids, self.worker_id, self.lease_seconds)
        lost = job.taken(set(ids) - held)
        if not lost:
            with self._job_lock:
                if self._job is not None and self._job.same_claim(job):
                    self._lease_deadline = now + self.lease_seconds
                    self._next_renew = now + self.renew_seconds
        else:
            current = self._job  # the rows may have been stored meanwhile, and the next job claimed
            if current is not None and lost & set(current.ids):
                self._job_taken(current, f"job(s) {sorted(lost)} reclaimed, released or ended by someone else")

    def _heartbeat(self, conn: db.Conn, job: CurrentJob | None) -> None:
        params = {
            "worker_id": self.worker_id,
            "host_label": self.host_label,
            "queue": self.queue,
            "pid": os.getpid(),
            "lock_key": self.session.lock_key,
            "state": self._reported_state(),
            "current_job_id": job.job_id if job else None,
        }
        params.update(self.gpu_fields())
        conn.execute(_WORKER.sql("upsert_heartbeat"), params)
        self.health.touch(f"worker {self.worker_id} ({params['state']}) beat")

    def _job_taken(self, job: CurrentJob, why: str) -> None:
        self._trip(job, Trip(EXIT_JOB_TAKEN, f"no longer ours ({why}); stopping rather than running it twice"))

    def _trip(self, job: CurrentJob | None, trip: Trip, *, whatever_runs: bool = False) -> None:
        """Every trip ends here: one write for the job (if it is still ours to write), then exit.

        It decides behind the commit fence. A trip about `job` lapses once that job's code has
        returned; `whatever_runs` (a hard stop) stops what runs after the commit, first waiting
        for a returned job's outcome to be stored, since a finished job is not to be run again.
        """
        deadline = time.monotonic() + self.fence.wait_seconds
        while True:
            with self.fence.deciding(deadline - time.monotonic()) as fenced, self._job_lock:
                if whatever_runs:
                    job = self._job
                elif job is not None and self._job is not job:
                    return  # the job finished meanwhile
                returned = job is not None and self._returned
                if returned and not whatever_runs:
                    return  # nothing of it is left running to stop
                if not returned or not fenced or time.monotonic() >= deadline:  # past the wait: hand it back anyway
                    self._job, self._returned, self._exiting = None, False, True
                    self.watch.finish()
                    device_check = (self.host_label, self.queue) if self.queue == "gpu" and trip.code in DEVICE_SUSPECT_EXITS else None
                    stop_job(job, trip, url=self.url, worker_id=self.worker_id, max_trips=self.max_trips, exit_fn=self.exit_fn,
                             device_check=device_check, origin=(self.host_label, self.queue))
                    return
            time.sleep(0.01)  # the outcome is on its way to its commit

    def _failed(self, exc: Exception) -> None:
        if self._lost_at is None:
            self._lost_at = self.now_fn()
            if isinstance(exc, psycopg.OperationalError):
                log.warning("liveness: database connection lost (%s); reconnecting", first_line(exc))
            else:
                log.exception("liveness beat failed; retrying")
        else:
            log.debug("liveness: still failing: %s", first_line(exc))
        conn, self._conn = self._conn, None
        if conn is not None:
            try:
                conn.close()
            except Exception:  # noqa: BLE001
                pass

    def _reported_state(self) -> str:
        if self.state != "idle":
            return self.state
        if self.switch.parked:
            return "parked"
        return "throttled" if self.throttle is not None and self.throttle.active else "idle"

    def _next_due(self) -> float:
        self.pacer.long_sleep = True  # before the look at the job: a job_started() after it pokes
        chores = min(self._next_heartbeat, self._next_control_check, self._next_memory_check if self.throttle is not None else float("inf"))
        job_due = min(self._next_renew, self._lease_deadline - self.lease_margin) if self._job is not None else None
        return self.pacer.due(self.now_fn(), chores, job_due)
