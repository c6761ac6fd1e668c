"""Claim latency under bloat: an empty queue, 1M queued + 10M finished retained, then a transaction pinning the horizon.

Four worker processes churn (the engine's real claim statement, then the job's completion, each
its own commit) and time every claim. Three phases, one database: (1) a near-empty queue that a
producer keeps topped up; (2) N queued jobs behind M terminal rows, loaded with INSERT ... SELECT
generate_series and vacuumed (the load time is printed); (3) the same while a separate connection
holds a REPEATABLE READ snapshot open, idle in transaction, so vacuum can remove no dead version:
claim p50/p99 sampled per window. Target: p99 under the pinned horizon <= 2x the empty-queue p99.
The claim's `EXPLAIN (ANALYZE, BUFFERS)` is printed at the end of the pinned window.

    python benchmarks/bloat.py [--queued 1000000] [--retained 10000000] [--pinned 600] [--sample 30]
"""

from __future__ import annotations

import json
import sys
import threading
import time
from pathlib import Path

import common
import psycopg
from common import Procs

QUEUE = "fetch"


def load_rows(url: str, queued: int, retained: int) -> float:
    """Terminal rows first (lower ids, as history would be), then the queued ones; vacuumed. Returns seconds."""
    started = time.monotonic()
    with psycopg.connect(url, autocommit=True) as conn:
        step = 1_000_000
        for low in range(0, retained, step):
            conn.execute("INSERT INTO ingest_jobs (task_name, queue, status, attempts, started_at, finished_at, result) "
                         "SELECT 'noop', %s, 'completed', 1, now(), now(), '{}'::jsonb FROM generate_series(1, %s)",
                         (QUEUE, min(step, retained - low)))
        conn.execute("INSERT INTO ingest_jobs (task_name, queue) SELECT 'noop', %s FROM generate_series(1, %s)", (QUEUE, queued))
        conn.execute("VACUUM ANALYZE ingest_jobs")
    return time.monotonic() - started


def explain_claim(url: str) -> tuple[str, str]:
    """The claim's plan in a fresh session, then in one that has claimed once (what a churning worker runs); both rolled back."""
    from queue_workflows import jobstore, node_queue

    claimant = jobstore.Claimant("explain", 0)
    plans = []
    with psycopg.connect(url) as conn:
        statement, params = node_queue.claim_statement("ingest_jobs", QUEUE, claimant)
        text = f"EXPLAIN (ANALYZE, BUFFERS, COSTS OFF) {statement.as_string(conn)}"
        plans.append("\n".join(f"      {r[0]}" for r in conn.execute(text, params).fetchall()))  # type: ignore[arg-type]
        conn.rollback()
        job = node_queue.claim_ingest_job(QUEUE, claimant, conn=conn)  # committed: the session now has what a worker has
        conn.commit()
        plans.append("\n".join(f"      {r[0]}" for r in conn.execute(text, params).fetchall()))  # type: ignore[arg-type]
        conn.rollback()
        if job is not None:
            node_queue.mark_ingest_completed(job["id"], {"ok": 1}, worker_id=claimant.worker_id, conn=conn)
            conn.commit()
    return plans[0], plans[1]


def churn(url: str, index: int, out: str, stop: str) -> None:
    """One worker process: claim, complete, repeat; each claim's wall time appended to `out` as `epoch seconds`."""
    import queue_workflows
    from queue_workflows import jobstore, node_queue

    queue_workflows.configure(database_url=url, ingest_queues=frozenset({QUEUE}))
    claimant = jobstore.Claimant(f"bloat:{index}", 1000 + index)
    stop_path = Path(stop)
    with psycopg.connect(url, autocommit=True) as conn, open(out, "a", buffering=1) as log:
        while not stop_path.exists():
            started = time.perf_counter()
            job = node_queue.claim_ingest_job(QUEUE, claimant, conn=conn)
            took = time.perf_counter() - started
            log.write(f"{time.time():.3f} {took:.6f}\n")
            if job is None:
                time.sleep(0.01)
                continue
            node_queue.mark_ingest_completed(job["id"], {"ok": 1}, worker_id=claimant.worker_id, conn=conn)


def read_samples(paths: list[Path], since: float, until: float) -> list[float]:
    samples = []
    for path in paths:
        for line in path.read_text().splitlines():
            parts = line.split()
            if len(parts) == 2 and since <= float(parts[0]) < until:
                samples.append(float(parts[1]))
    return samples


def stats(samples: list[float]) -> tuple[float, float]:
    return common.median(samples) * 1000, common.percentile(samples, 99) * 1000


class Churn:
    """Four churning worker processes, their claim logs, and a stop file."""

    def __init__(self, procs: Procs, url: str, workers: int, tag: str) -> None:
        self.dir = procs.log_dir
        self.stop_file = self.dir / f"stop-{tag}"
        self.logs = [self.dir / f"claims-{tag}-{i}.log" for i in range(workers)]
        env = common.child_env(url)
        self.children = [procs.spawn(f"churn-{tag}-{i}", [sys.executable, __file__, "--churn", json.dumps([url, i, str(log), str(self.stop_file)])], env)
                         for i, log in enumerate(self.logs)]
        self.procs = procs
        for log in self.logs:  # started once every worker has logged a claim
            common.testing.wait_until(lambda log=log: log.exists() and log.stat().st_size > 0, timeout=60, interval=0.05, what="a worker's first claim")

    def window(self, seconds: float) -> list[float]:
        since = time.time()
        time.sleep(seconds)
        self.procs.check_alive(self.children)
        return read_samples(self.logs, since, time.time())

    def close(self) -> None:
        self.stop_file.touch()
        self.procs.stop(self.children, timeout=30)


def top_up(url: str, stop: threading.Event, low: int = 1000) -> None:
    """Keep the queue near empty but never dry: a thousand more whenever fewer than `low` are queued."""
    with psycopg.connect(url, autocommit=True) as conn:
        while not stop.is_set():
            queued = conn.execute("SELECT count(*) FROM ingest_jobs WHERE status = 'queued'").fetchone()[0]  # type: ignore[index]
            if queued < low:
                conn.execute("INSERT INTO ingest_jobs (task_name, queue) SELECT 'noop', %s FROM generate_series(1, 1000)", (QUEUE,))
            stop.wait(0.1)


def main(argv: list[str] | None = None) -> int:
    parser = common.base_parser(__doc__.splitlines()[0])
    parser.add_argument("--queued", type=int, default=None, help="jobs queued in phase 2 (default 1,000,000; 100,000 with --quick)")
    parser.add_argument("--retained", type=int, default=None, help="terminal rows retained (default 10,000,000; 1,000,000 with --quick)")
    parser.add_argument("--pinned", type=float, default=None, help="seconds the horizon stays pinned (default 600; 60 with --quick)")
    parser.add_argument("--sample", type=float, default=None, help="seconds per pinned sample (default 30; 10 with --quick)")
    parser.add_argument("--phase", type=float, default=None, help="seconds of the empty and loaded phases (default 30; 5 with --quick)")
    parser.add_argument("--workers", type=int, default=4)
    parser.add_argument("--churn", help=argparse_hidden())
    args = parser.parse_args(argv)
    if args.churn:
        churn(*json.loads(args.churn))
        return 0
    queued = args.queued or (100_000 if args.quick else 1_000_000)
    retained = args.retained if args.retained is not None else (1_000_000 if args.quick else 10_000_000)
    pinned = args.pinned or (60.0 if args.quick else 600.0)
    sample = args.sample or (10.0 if args.quick else 30.0)
    phase = args.phase or (5.0 if args.quick else 30.0)
    rows: list[list[str]] = []
    with common.postgres_server(args.database_url) as server_url, Procs(args.keep_logs) as procs:
        common.banner(f"bloat: claim p50/p99, {args.workers} workers churning; empty, {queued:,} queued + {retained:,} retained, "
                      f"then a snapshot held {pinned:.0f} s", args, server_url)
        url = common.qw_database(server_url)
        try:
            stop_top_up = threading.Event()
            producer = threading.Thread(target=top_up, args=(url, stop_top_up), daemon=True)
            producer.start()
            time.sleep(0.5)
            workers = Churn(procs, url, args.workers, "empty")
            base_p50, base_p99 = stats(workers.window(phase))
            workers.close()
            stop_top_up.set()
            producer.join()
            rows.append(["empty queue", "", f"{base_p50:.2f}", f"{base_p99:.2f}", "1.00x"])
            print(f"   empty queue: p50 {base_p50:.2f} ms  p99 {base_p99:.2f} ms", flush=True)
            with psycopg.connect(url, autocommit=True) as conn:
                conn.execute("TRUNCATE ingest_jobs")
            took = load_rows(url, queued, retained)
            print(f"   loaded {queued:,} queued + {retained:,} terminal rows and vacuumed in {took:.0f} s", flush=True)
            workers = Churn(procs, url, args.workers, "loaded")
            p50, p99 = stats(workers.window(phase))
            rows.append([f"{queued:,} queued + {retained:,} retained", "", f"{p50:.2f}", f"{p99:.2f}", common.ratio(p99, base_p99)])
            print(f"   loaded: p50 {p50:.2f} ms  p99 {p99:.2f} ms", flush=True)
            with psycopg.connect(url) as pin:
                pin.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ")
                pin.execute("SELECT count(*) FROM worker_heartbeats")  # the snapshot is taken: the horizon stays here
                elapsed = 0.0
                worst = 0.0
                while elapsed < pinned:
                    p50, p99 = stats(workers.window(min(sample, pinned - elapsed)))
                    elapsed += sample
                    worst = max(worst, p99)
                    rows.append([f"pinned, {min(elapsed, pinned):.0f} s", f"{len(read_samples(workers.logs, 0, time.time())):,}",
                                 f"{p50:.2f}", f"{p99:.2f}", common.ratio(p99, base_p99)])
                    print(f"   pinned {min(elapsed, pinned):.0f} s: p50 {p50:.2f} ms  p99 {p99:.2f} ms ({p99 / base_p99:.2f}x empty p99)", flush=True)
                plan = explain_claim(url)
                workers.close()
                dead = common.scalar(url, "SELECT n_dead_tup FROM pg_stat_user_tables WHERE relname = 'ingest_jobs'")
                pin.rollback()
        finally:
            procs.stop(procs.started)
            from queue_workflows import db

            db.close_pools()
            common.drop_database(server_url, url)
    common.print_table(["case", "claims so far", "p50 ms", "p99 ms", "p99 vs empty"], rows)
    verdict = "met" if worst <= 2 * base_p99 else "NOT met"
    print(f"\n   worst pinned p99 {worst:.2f} ms = {worst / base_p99:.2f}x the empty-queue p99 (target <= 2x: {verdict}); "
          f"dead tuples at the end: {dead:,}")
    first, warm = plan
    print(f"\n   one claim at the end of the pinned window, in a session that has claimed before (EXPLAIN ANALYZE, BUFFERS):\n{warm}")
    print(f"\n   the same claim as a session's first (EXPLAIN ANALYZE, BUFFERS; its first line):\n{first.splitlines()[0]}\n{first.splitlines()[1]}")
    return 0


def argparse_hidden() -> str:
    import argparse

    return argparse.SUPPRESS


if __name__ == "__main__":
    sys.exit(main())
