"""Concurrent producers, one job per transaction: enqueue rate with the ready trigger vs without, and wake latency.

N producer processes (1, 8, 32) each call `node_queue.enqueue_ingest_job(..., conn=conn)` and
commit, one job per transaction, for a fixed time, all started together. Each N runs twice in
the same run, alternating, on the same table emptied before each pass:

  trigger      the schema as shipped: every trigger on ingest_jobs, the ready trigger included
  no notify    the same, with the ready-on-insert trigger (the one that may NOTIFY) disabled

so the ratio is what waking workers costs producers. The producers are started once per N and run
every pass (`--repeats` pairs, alternating), so the ratio is a median of pairs measured minutes apart at most. No worker runs during these passes: the
producers' own cost is measured, as when workers are all busy. Then, in the same run, the wake
latency: one idle worker LISTENing, one job enqueued at a time, timed from the enqueue's COMMIT
(`track_commit_timestamp`) to the worker's claim, against a bare LISTEN/NOTIFY round trip
(latency.py's ping-pong).

    python benchmarks/producers.py [--seconds 5] [--producers 1,8,32] [--samples 200] [--quick]
"""

from __future__ import annotations

import json
import subprocess
import sys
import time

import common
import latency
import psycopg
import systems
from common import Procs, percentile

PRODUCER_SCRIPT = """
import json, sys, time
import queue_workflows
from queue_workflows import db, node_queue
url = sys.argv[1]
queue_workflows.configure(database_url=url, ingest_queues=frozenset({"fetch"}))
import bench_app  # registers the task enqueue validates
with db.connect(url=url) as conn:
    node_queue.enqueue_ingest_job("noop", "fetch", reason="warm", conn=conn)
    conn.rollback()  # warm the statement cache; nothing written
    print("ready", flush=True)
    for line in sys.stdin:  # one pass per line: the parent's go, once every producer is ready
        start_at, seconds = map(float, line.split())
        while time.time() < start_at:
            time.sleep(0.001)
        done, stop_at = 0, start_at + seconds
        while time.time() < stop_at:
            node_queue.enqueue_ingest_job("noop", "fetch", reason="bench", conn=conn)
            conn.commit()
            done += 1
        print(json.dumps({"jobs": done}), flush=True)
"""

READY_TRIGGER = "ingest_jobs_ready_on_insert"


class Producers:
    """`n` producer processes, started once and run through every pass."""

    def __init__(self, url: str, n: int) -> None:
        self.url = url
        self.children = [subprocess.Popen([sys.executable, "-c", PRODUCER_SCRIPT, url], env=common.child_env(),
                                          stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                          cwd=common.BENCH_DIR) for _ in range(n)]
        for child in self.children:
            if self._line(child) != "ready":
                raise RuntimeError(f"producer failed to start: {self._error(child)}")

    @staticmethod
    def _line(child: subprocess.Popen[str]) -> str:
        assert child.stdout is not None
        return child.stdout.readline().strip()

    @staticmethod
    def _error(child: subprocess.Popen[str]) -> str:
        child.kill()
        return child.communicate(timeout=30)[1][-800:]

    def run(self, seconds: float, *, notify_trigger: bool) -> tuple[float, int]:
        """Jobs per second the producers committed in `seconds`, with the ready trigger on or off, and the NOTIFYs they sent."""
        listener = psycopg.connect(self.url, autocommit=True)  # only listens: no baton, so no worker waits
        listener.execute("LISTEN qw_ready_fetch")
        with psycopg.connect(self.url, autocommit=True) as conn:
            conn.execute("TRUNCATE ingest_jobs RESTART IDENTITY")
            conn.execute(f"ALTER TABLE ingest_jobs {'ENABLE' if notify_trigger else 'DISABLE'} TRIGGER {READY_TRIGGER}")
            conn.execute("CHECKPOINT")  # each pass starts from the same WAL state
        start_at = time.time() + 0.2
        for child in self.children:
            assert child.stdin is not None
            child.stdin.write(f"{start_at} {seconds}\n")
            child.stdin.flush()
        total = 0
        for child in self.children:
            line = self._line(child)
            if not line:
                raise RuntimeError(f"producer failed: {self._error(child)}")
            total += json.loads(line)["jobs"]
        with psycopg.connect(self.url, autocommit=True) as conn:
            counted = conn.execute("SELECT count(*) FROM ingest_jobs").fetchone()[0]  # type: ignore[index]
            conn.execute(f"ALTER TABLE ingest_jobs ENABLE TRIGGER {READY_TRIGGER}")
        if counted != total:
            raise RuntimeError(f"producers reported {total} jobs but the table holds {counted}")
        notifies = sum(1 for _ in listener.notifies(timeout=1.0))  # one per enqueuing transaction that notified
        listener.close()
        return total / seconds, notifies

    def close(self) -> None:
        for child in self.children:
            if child.stdin is not None:
                child.stdin.close()
        for child in self.children:
            try:
                child.wait(timeout=30)
            except subprocess.TimeoutExpired:
                child.kill()


def notifying_transactions(url: str) -> str:
    """How the ready trigger decides to NOTIFY, as shipped (for the header)."""
    body = psycopg.connect(url, autocommit=True).execute(
        "SELECT prosrc FROM pg_proc WHERE proname = 'qw_notify_job_ready'").fetchone()[0]  # type: ignore[index]
    return "only while a worker waits (idle baton held or asked for)" if "pg_try_advisory_xact_lock_shared" in body else "every enqueuing transaction"


def ms(v: float) -> str:
    return f"{v * 1000:.2f}"


def main(argv: list[str] | None = None) -> int:
    parser = common.base_parser(__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=None, help="seconds per pass (default 5; 2 with --quick)")
    parser.add_argument("--producers", default=None, help="comma separated producer counts (default 1,8,32; 1,32 with --quick)")
    parser.add_argument("--repeats", type=int, default=None, help="alternating pass pairs per producer count, medians reported (default 3; 1 with --quick)")
    parser.add_argument("--samples", type=int, default=None, help="wake-latency samples (default 200; 30 with --quick)")
    args = parser.parse_args(argv)
    seconds = args.seconds or (2.0 if args.quick else 5.0)
    counts = [int(c) for c in (args.producers or ("1,32" if args.quick else "1,8,32")).split(",")]
    samples = args.samples or (30 if args.quick else 200)
    args.repeats = args.repeats or (1 if args.quick else 3)

    with common.postgres_server(args.database_url, commit_timestamps=True) as server_url, Procs(args.keep_logs) as procs:
        common.banner(f"producers: 1 job per transaction, {seconds:.0f} s per pass; wake latency, {samples} jobs", args, server_url)
        url = common.qw_database(server_url)
        try:
            print(f"   ready trigger notifies: {notifying_transactions(url)}", flush=True)
            rows = []
            for n in counts:
                producers = Producers(url, n)
                try:
                    pairs = [(producers.run(seconds, notify_trigger=True), producers.run(seconds, notify_trigger=False))
                             for _ in range(args.repeats)]
                finally:
                    producers.close()
                ratios = sorted(a[0] / b[0] for a, b in pairs)
                with_trigger, without = common.median([a[0] for a, _ in pairs]), common.median([b[0] for _, b in pairs])
                sent = sum(a[1] for a, _ in pairs) / max(1.0, sum(a[0] * seconds for a, _ in pairs))
                rows.append([n, f"{with_trigger:,.0f}", f"{without:,.0f}", f"{common.median(ratios):.2f}x",
                             f"{ratios[0]:.2f}-{ratios[-1]:.2f}x", f"{sent:.0%}"])
                print(f"   {n} producer(s): " + ", ".join(f"{a[0]:,.0f} vs {b[0]:,.0f}" for a, b in pairs)
                      + " jobs/s (trigger vs no notify)", flush=True)
        finally:
            common.drop_database(server_url, url)
        rtts = latency.notify_baseline(server_url, procs, samples)
        system = systems.QueueWorkflows(server_url)
        try:
            system.setup()
            wakes, note = latency.measure(system, procs, samples, 8.0 if args.quick else 60.0, from_commit=True)
        finally:
            system.teardown()

    print()
    common.print_table(["producers", "trigger jobs/s", "no-notify jobs/s", "trigger / no-notify", "range", "txns that NOTIFY"], rows)
    start = [s for s, _ in wakes]
    base50, base99 = percentile(rtts, 50), percentile(rtts, 99)
    print()
    common.print_table(["wake-up", "n", "p50 ms", "p99 ms", "p50 / NOTIFY RTT", "note"], [
        ["enqueue COMMIT -> idle worker's claim", len(start), ms(percentile(start, 50)), ms(percentile(start, 99)),
         common.ratio(percentile(start, 50), base50), note],
        ["LISTEN/NOTIFY round trip", len(rtts), ms(base50), ms(base99), "1.00x", "floor"],
    ])
    print("   trigger / no-notify: the same producers' rate with the shipped triggers over their rate with the ready trigger")
    print(f"   disabled, passes alternating, {args.repeats} pairs, median and range of the pairs' ratios; txns that NOTIFY:")
    print("   the share of the trigger passes' enqueuing transactions that sent a NOTIFY (no worker was waiting).")
    print("   (targets: >= 0.90x at 32 producers; wake p50 <= 1.3x the round trip).")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
