"""The orchestrator's cluster metrics: what the leader samples from the database every interval; names in docs/metrics.md.

Every orchestrator samples; only the leader reads the cluster (queues, finished jobs, workers,
exits), so one scrape of it sees the whole cluster and nothing is counted twice. A standby reads
only the term. Counters and histograms belong to one term (`Office`): a new leader starts them
at zero, which Prometheus's rate() takes for a restart. A scrape renders the last `Sample` and
never queries (cluster_exposition.py).
"""

from __future__ import annotations

import bisect
import logging
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace

import psycopg

from queue_workflows import db
from queue_workflows.common import sqlfile
from queue_workflows.common.text import first_line

log = logging.getLogger(__name__)

_Q = sqlfile.load("queue_workflows.leader", "cluster_metrics.sql")

LIVE_STATUSES = ("queued", "running", "scheduled", "waiting")
WORKER_STATES = ("idle", "busy", "stopping", "parked", "throttled", "dead", "absent")  # the dashboard's (views.WORKER_STATES)
OUTCOMES = ("completed", "failed")
# Seconds; one set for both histograms (a wait and a run both span milliseconds to hours).
BUCKETS = (0.01, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0, 300.0, 600.0, 1800.0, 3600.0, 7200.0)
OTHER_TASK = "other"
# The finished-jobs window ends this long ago by the database's clock, so a finish still committing is read next time.
FINISH_LAG_SECONDS = 5.0


class Histogram:
    """A Prometheus histogram kept as per-bucket counts (the last one +Inf) and a sum."""

    def __init__(self, bounds: tuple[float, ...] = BUCKETS) -> None:
        self.bounds = bounds
        self.counts = [0] * (len(bounds) + 1)
        self.total = 0.0

    def observe(self, value: float) -> None:
        self.add(self.index_of(value), 1, value)

    def index_of(self, value: float) -> int:
        """How many bounds lie below `value`: the index of its bucket, the smallest bound at or above it (Prometheus's `le`)."""
        return bisect.bisect_left(self.bounds, value)

    def add(self, index: int, n: int, total: float) -> None:
        """`n` observations in bucket `index` (len(bounds): +Inf) that sum to `total`."""
        self.counts[min(max(index, 0), len(self.bounds))] += n
        self.total += total

    def cumulative(self) -> list[tuple[str, float]]:
        """[(le, observations at or below it)], ending with +Inf, as an exposition writes them."""
        out, running = [], 0
        for le, n in zip([*(repr(b) for b in self.bounds), "+Inf"], self.counts, strict=True):
            running += n
            out.append((le, float(running)))
        return out


class TaskFolder:
    """The task label: the first `max_tasks` task names seen keep theirs, later ones become 'other'."""

    def __init__(self, max_tasks: int) -> None:
        self.max_tasks = max_tasks
        self.kept: set[str] = set()

    def __call__(self, task: str) -> str:
        if task in self.kept:
            return task
        if len(self.kept) < self.max_tasks and task != OTHER_TASK:
            self.kept.add(task)
            return task
        return OTHER_TASK


@dataclass
class Office:
    """One term's counters, from zero when it began."""

    epoch: int
    folder: TaskFolder
    reclaims: Callable[[], Mapping[str, int]] = dict  # the leader's own sweep counts them: it alone reclaims
    finished_since: float | None = None  # database epoch seconds; None until the first sample of the term
    exits_after: int | None = None  # qw_worker_exits.id watermark
    completed: dict[str, int] = field(default_factory=dict)
    failed: dict[str, int] = field(default_factory=dict)
    wait: dict[str, Histogram] = field(default_factory=dict)
    run: dict[str, Histogram] = field(default_factory=dict)
    exits: dict[int, int] = field(default_factory=dict)
    known_queues: set[str] = field(default_factory=set)
    known_workers: set[tuple[str, str]] = field(default_factory=set)


@dataclass(frozen=True)
class Sample:
    """What a scrape renders: the standby set always, the cluster figures only on the leader."""

    is_leader: bool = False
    term: int = 0
    database_up: bool = False
    sampled_at: float = 0.0
    fresh: bool = False  # the gauges below were read by the last sample (not left over from before an outage)
    queue_jobs: dict[tuple[str, str], int] = field(default_factory=dict)  # (queue, status)
    oldest_queued_s: dict[str, float] = field(default_factory=dict)
    workers: dict[tuple[str, str, str], int] = field(default_factory=dict)  # (host, queue, state)
    completed: dict[str, int] = field(default_factory=dict)
    failed: dict[str, int] = field(default_factory=dict)
    wait: dict[str, list[tuple[str, float]]] = field(default_factory=dict)  # queue -> cumulative buckets
    wait_sum: dict[str, float] = field(default_factory=dict)
    run: dict[str, list[tuple[str, float]]] = field(default_factory=dict)
    run_sum: dict[str, float] = field(default_factory=dict)
    reclaims: dict[str, int] = field(default_factory=dict)
    exits: dict[int, int] = field(default_factory=dict)


class ClusterMetrics:
    """Samples every `interval` seconds until stopped; `took_office`/`left_office` follow the leader's term."""

    def __init__(
        self,
        *,
        interval: float,
        max_tasks: int,
        stale_after_seconds: float,
        url: str | None = None,
        lag_seconds: float = FINISH_LAG_SECONDS,
        now_fn: Callable[[], float] = time.time,
    ) -> None:
        self.interval = interval
        self.max_tasks = max_tasks
        self.stale_after_seconds = stale_after_seconds
        self.url = url
        self.lag_seconds = lag_seconds
        self.now_fn = now_fn
        self._lock = threading.Lock()
        self._office: Office | None = None
        self._sample = Sample()
        self._conn: db.Conn | None = None
        self._down_logged = False

    # --- the term ---------------------------------------------------------------------------

    def took_office(self, epoch: int, reclaims: Callable[[], Mapping[str, int]] = dict) -> None:
        with self._lock:
            self._office = Office(epoch, TaskFolder(self.max_tasks), reclaims)
            self._sample = Sample(is_leader=True, term=epoch, database_up=self._sample.database_up, sampled_at=self._sample.sampled_at)

    def left_office(self) -> None:
        with self._lock:
            self._office = None
            self._sample = Sample(term=self._sample.term, database_up=self._sample.database_up, sampled_at=self._sample.sampled_at)

    def latest(self) -> Sample:
        with self._lock:
            return self._sample

    # --- sampling ----------------------------------------------------------------------------

    def sample(self, conn: db.Conn) -> Sample:
        """One sample: the term, and on the leader the cluster; published unless the term changed meanwhile."""
        with self._lock:
            office = self._office
        row = conn.execute(_Q["cluster_term"]).fetchone()
        assert row is not None
        term, db_now = int(row["epoch"]), float(row["db_now"])
        if office is None:
            sample = Sample(term=term, database_up=True, sampled_at=self.now_fn())
        else:
            sample = self._sample_cluster(conn, office, db_now)
        with self._lock:
            if self._office is office:
                self._sample = sample
        return sample

    def _sample_cluster(self, conn: db.Conn, office: Office, db_now: float) -> Sample:
        jobs: dict[tuple[str, str], int] = {}
        oldest: dict[str, float] = {}
        for r in conn.execute(_Q["cluster_queue_depth"]):
            jobs[(r["queue"], r["status"])] = jobs.get((r["queue"], r["status"]), 0) + int(r["n"])
            if r["oldest_s"] is not None:
                oldest[r["queue"]] = max(oldest.get(r["queue"], 0.0), float(r["oldest_s"]))
        workers: dict[tuple[str, str, str], int] = {}
        for r in conn.execute(_Q["cluster_workers"], {"stale_after_seconds": self.stale_after_seconds}):
            key = (r["host_label"], r["queue"], r["state"])
            workers[key] = workers.get(key, 0) + int(r["n"])
        self._count_finished(conn, office, db_now)
        self._count_exits(conn, office)
        office.known_queues.update(q for q, _ in jobs)
        office.known_queues.update(office.wait)
        office.known_workers.update((h, q) for h, q, _ in workers)
        return render(office, jobs=jobs, oldest=oldest, workers=workers, sampled_at=self.now_fn())

    def _count_finished(self, conn: db.Conn, office: Office, db_now: float) -> None:
        until = db_now - self.lag_seconds
        if office.finished_since is None:  # jobs finished before this term are not its to count
            office.finished_since = until
            return
        if until <= office.finished_since:
            return
        rows = conn.execute(_Q["cluster_finished_between"], {"since": office.finished_since, "until": until, "bounds": list(BUCKETS)}).fetchall()
        add_finished(office, rows)  # only once the read succeeded: a failed read counts nothing, and is read again
        office.finished_since = until

    def _count_exits(self, conn: db.Conn, office: Office) -> None:
        if office.exits_after is None:
            row = conn.execute(_Q["cluster_exits_watermark"]).fetchone()
            office.exits_after = int(row["last_id"]) if row else 0
            return
        rows = conn.execute(_Q["cluster_exits_after"], {"after_id": office.exits_after}).fetchall()
        for r in rows:
            office.exits[int(r["code"])] = office.exits.get(int(r["code"]), 0) + int(r["n"])
            office.exits_after = max(office.exits_after, int(r["last_id"]))

    def step(self) -> None:
        """One sample on this loop's own connection; an unreachable database turns `database_up` to 0."""
        try:
            if self._conn is None or self._conn.closed:
                self._conn = db.connect(autocommit=True, url=self.url)
                timeout_ms = str(max(1, int(min(5.0, self.interval) * 1000)))
                self._conn.execute(_Q["cluster_session"], {"statement_timeout_ms": timeout_ms})
            self.sample(self._conn)
            if self._down_logged:
                log.info("cluster metrics: the database answers again")
            self._down_logged = False
        except (psycopg.Error, OSError) as exc:
            if not self._down_logged:
                log.warning("cluster metrics: sampling failed (%s); the cluster gauges are left out until it works again", first_line(exc))
                self._down_logged = True
            self._close()
            with self._lock:
                self._sample = replace(self._sample, database_up=False, fresh=False)

    def run(self, stop: threading.Event, sleep_fn: Callable[[float], object] | None = None) -> None:
        wait = sleep_fn or stop.wait
        try:
            while not stop.is_set():
                try:
                    self.step()
                except Exception:  # noqa: BLE001 - the orchestrator's metrics must not end over one bad sample
                    log.exception("cluster metrics: sample failed")
                wait(self.interval)
        finally:
            self._close()

    def _close(self) -> None:
        if self._conn is not None:
            try:
                self._conn.close()
            except psycopg.Error:
                pass
        self._conn = None


def add_finished(office: Office, rows: list[dict]) -> None:
    """Count the grouped finished jobs of `cluster_finished_between` into the term's counters and histograms.

    Task names new in one read meet the cap in name order, so which ones keep their label does not hang on row order.
    """
    for r in sorted(rows, key=lambda r: str(r["task"])):
        queue, task, n = r["queue"], office.folder(r["task"]), int(r["n"])
        counter = office.completed if r["status"] == "completed" else office.failed
        counter[task] = counter.get(task, 0) + n
        timed = int(r["timed"])  # jobs that never started (NULL durations) are in no histogram
        if timed:
            office.wait.setdefault(queue, Histogram()).add(int(r["wait_i"] or 0), timed, float(r["wait_sum"]))
            office.run.setdefault(queue, Histogram()).add(int(r["run_i"] or 0), timed, float(r["run_sum"]))


def render(
    office: Office, *, jobs: dict[tuple[str, str], int], oldest: dict[str, float],
    workers: dict[tuple[str, str, str], int], sampled_at: float,
) -> Sample:
    """The leader's sample: a queue or a (host, queue) seen once in the term keeps its series at 0."""
    queues = sorted(office.known_queues | {q for q, _ in jobs})
    return Sample(
        is_leader=True, term=office.epoch, database_up=True, sampled_at=sampled_at, fresh=True,
        queue_jobs={(q, s): jobs.get((q, s), 0) for q in queues for s in LIVE_STATUSES},
        oldest_queued_s={q: oldest.get(q, 0.0) for q in queues},
        workers={(h, q, s): workers.get((h, q, s), 0) for h, q in sorted(office.known_workers) for s in WORKER_STATES},
        completed=dict(office.completed), failed=dict(office.failed),
        wait={q: h.cumulative() for q, h in office.wait.items()}, wait_sum={q: h.total for q, h in office.wait.items()},
        run={q: h.cumulative() for q, h in office.run.items()}, run_sum={q: h.total for q, h in office.run.items()},
        reclaims=dict(office.reclaims()), exits=dict(office.exits),
    )
