"""Wake latency for producers.py, both sides timed alike: from the producer's just-before-COMMIT to the listener's reaction.

All times are `time.monotonic()` (CLOCK_MONOTONIC, one clock for every process on the host):

  bare NOTIFY        a producer INSERTs into a trigger-less scratch table and NOTIFYs in one
                     transaction; a listener process (psycopg, waiting as the worker waits:
                     queue_workflows.common.wake.notifies) stamps the NOTIFY's arrival
  bare + claim       the same listener first runs one claim-sized round trip (an autocommit
                     UPDATE ... FOR UPDATE SKIP LOCKED ... RETURNING of the scratch row, so its
                     commit's WAL flush too, as the worker's claim pays), then stamps
  idle worker        a real `qw_services.worker` holding the queue's idle baton; the producer
                     enqueues one `stamp` job (bench_app) and commits; the job's code returns its
                     own start instant, so the figure ends once the worker has claimed and started it
"""

from __future__ import annotations

import random
import subprocess
import sys
import time

import common
import psycopg
import systems
from common import Procs

from queue_workflows import db, node_queue, testing

LISTENER_SCRIPT = """
import sys, time, psycopg
from queue_workflows.common.wake import notifies
url, claim = sys.argv[1], sys.argv[2] == "claim"
CLAIM = ("UPDATE bench_wake_scratch SET taken = true WHERE id = (SELECT id FROM bench_wake_scratch WHERE NOT taken "
         "ORDER BY id LIMIT 1 FOR UPDATE SKIP LOCKED) RETURNING id")
with psycopg.connect(url, autocommit=True) as conn:
    conn.execute("LISTEN bench_wake")
    print("ready", flush=True)
    while True:
        for note in notifies(conn, 1.0):
            if note.payload == "stop":
                raise SystemExit(0)
            if claim:  # one statement, one round trip, its own commit: as the worker's claim
                conn.execute(CLAIM).fetchone()
            print(note.payload, time.monotonic(), flush=True)
"""

SCRATCH = "CREATE TABLE bench_wake_scratch (id bigint PRIMARY KEY, taken boolean NOT NULL DEFAULT false)"
BATON_HELD = ("SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND classid = %s AND mode = 'ExclusiveLock' AND granted "
              "AND database = (SELECT oid FROM pg_database WHERE datname = current_database())")


def gap() -> None:
    time.sleep(random.uniform(0.005, 0.020))


class Bare:
    """A producer connection and a listener process on a scratch database: INSERT + NOTIFY -> the listener's stamp."""

    def __init__(self, server_url: str, *, claim: bool) -> None:
        self.server_url = server_url
        self.url = testing.create_database(server_url, "qwbench_wake")
        self.child = subprocess.Popen([sys.executable, "-c", LISTENER_SCRIPT, self.url, "claim" if claim else "bare"],
                                      env=common.child_env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                      cwd=common.BENCH_DIR)
        self.conn = psycopg.connect(self.url)
        self.conn.execute(SCRATCH)
        self.conn.commit()
        self.sent = 0
        if self._line() != "ready":
            raise RuntimeError(f"wake listener failed: {self.child.communicate(timeout=10)[1][-800:]}")

    def _line(self) -> str:
        assert self.child.stdout is not None
        return self.child.stdout.readline().strip()

    def sample(self) -> float:
        """Seconds from just before the producer's COMMIT to the listener's stamp."""
        self.sent += 1
        self.conn.execute("INSERT INTO bench_wake_scratch (id) VALUES (%s)", (self.sent,))
        self.conn.execute("SELECT pg_notify('bench_wake', %s)", (str(self.sent),))
        sent = time.monotonic()
        self.conn.commit()
        payload, at = self._line().split()
        if payload != str(self.sent):
            raise RuntimeError(f"wake listener answered {payload!r} to {self.sent}")
        return float(at) - sent

    def close(self) -> None:
        try:
            self.conn.execute("SELECT pg_notify('bench_wake', 'stop')")
            self.conn.commit()
            self.conn.close()
            self.child.wait(timeout=10)
        finally:
            if self.child.poll() is None:
                self.child.kill()
                self.child.wait()
            common.drop_database(self.server_url, self.url)


class Worker:
    """One real idle worker (holding the queue's idle baton) and a producer enqueuing `stamp` jobs."""

    def __init__(self, server_url: str, procs: Procs) -> None:
        self.procs = procs
        self.system = systems.QueueWorkflows(server_url)
        self.system.setup()
        self.started = systems.start_workers(self.system, procs, 1)
        self.producer = db.connect(url=self.system.url)
        self.watch = psycopg.connect(self.system.url, autocommit=True)

        self.to_claim: list[float] = []  # producer's COMMIT -> the claim statement's start (started_at), on the host's wall clock

    def sample(self) -> float:
        """Seconds from just before the enqueue's COMMIT to the job's code starting on the worker."""
        from queue_workflows.worker.idle_baton import BATON_NAMESPACE

        # Only a wake counts: the job must reach a worker that waits, not its catch-up claim.
        testing.wait_until(lambda: self.watch.execute(BATON_HELD, (BATON_NAMESPACE,)).fetchone()[0], timeout=10,  # type: ignore[index]
                           interval=0.002, what="the idle worker holding the baton")
        gap()
        job_id = int(node_queue.enqueue_ingest_job("stamp", "fetch", reason="bench", conn=self.producer)["id"])
        sent, sent_wall = time.monotonic(), time.time()
        self.producer.commit()
        time.sleep(0.02)  # no polling while the wake is in flight: the bare side's producer only blocks in a read
        started = testing.wait_until(lambda: self._stamp(job_id), timeout=10, interval=0.005, what=f"stamp job {job_id}") - sent
        claimed_at = self.watch.execute("SELECT extract(epoch FROM started_at) FROM ingest_jobs WHERE id = %s", (job_id,)).fetchone()[0]  # type: ignore[index]
        self.to_claim.append(float(claimed_at) - sent_wall)
        return started

    def _stamp(self, job_id: int) -> float | None:
        row = self.watch.execute("SELECT status, result FROM ingest_jobs WHERE id = %s", (job_id,)).fetchone()
        if row is None or row[0] not in ("completed", "failed"):
            return None
        if row[0] != "completed":
            raise RuntimeError(f"stamp job {job_id} failed")
        return float(row[1]["monotonic"])

    def close(self) -> None:
        try:
            self.producer.close()
            self.watch.close()
            self.procs.stop(self.started)
        finally:
            self.system.teardown()


PATHS = ("worker", "bare", "bare + claim")
TO_CLAIM = "worker: to its claim's start"


def measure(server_url: str, procs: Procs, samples: int, timeout: float) -> tuple[dict[str, list[float]], str]:
    """`samples` wakes on each path, interleaved (one of each in turn), so a busy moment of the host hits all three."""
    opened: dict[str, Bare | Worker] = {}
    out: dict[str, list[float]] = {name: [] for name in PATHS}
    note = ""
    try:
        opened["worker"] = Worker(server_url, procs)
        opened["bare"] = Bare(server_url, claim=False)
        opened["bare + claim"] = Bare(server_url, claim=True)
        deadline = time.monotonic() + timeout
        for _ in range(samples):
            for name in PATHS:
                out[name].append(opened[name].sample())
                gap()
            if time.monotonic() > deadline:
                note = f"stopped after {len(out['worker'])} samples ({timeout:.0f} s limit)"
                break
        out[TO_CLAIM] = opened["worker"].to_claim  # type: ignore[union-attr]
        return out, note
    finally:
        for path in opened.values():
            path.close()
