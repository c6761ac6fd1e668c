"""Enqueue through PgBouncer in transaction mode against Postgres directly, and the time a PgBouncer restart costs producers.

One database, one PgBouncer (the real binary, its own ini and port) in front of it. Timed: N
single-job `enqueue_ingest_job` calls from one thread and from 8 threads sharing the engine's
pool, and one `copy_ingest_jobs` of 10x N rows, each directly and through the pooler on an
emptied table; the ratio is direct / pooled time (>1: the pooler is slower). Then PgBouncer is
restarted under a producer loop (retry under a dedup key) `--restarts` times: the time from the
stop to the next acknowledged enqueue.

    python benchmarks/poolers.py [--jobs 2000] [--restarts 5] [--quick]
"""

from __future__ import annotations

import logging
import sys
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor

import common
import psycopg

logging.getLogger("psycopg.pool").setLevel(logging.CRITICAL)  # its reconnect warnings during the restarts are expected

sys.path.insert(0, str(common.BENCH_DIR.parent / "tests" / "support"))
from pgbouncer import PGBOUNCER, PgBouncer  # noqa: E402


def timed(reset: Callable[[], None], run: Callable[[], None]) -> float:
    reset()
    started = time.perf_counter()
    run()
    return time.perf_counter() - started


def restart_recovery(bouncer: PgBouncer, restarts: int) -> list[float]:
    """Seconds from each PgBouncer stop to the producer's next acknowledged enqueue."""
    from queue_workflows import node_queue

    acked, stop, n = [0], threading.Event(), [0]

    def produce() -> None:
        while not stop.is_set():
            try:
                node_queue.enqueue_ingest_job("noop", "fetch", {"i": n[0]}, dedup_key=f"r{n[0]}")
                acked[0] += 1
                n[0] += 1
            except psycopg.OperationalError:
                time.sleep(0.02)

    thread = threading.Thread(target=produce, daemon=True)
    thread.start()
    times = []
    try:
        for _ in range(restarts):
            time.sleep(0.3)
            before, stopped = acked[0], time.perf_counter()
            bouncer.restart()
            while acked[0] == before:
                time.sleep(0.001)
            times.append(time.perf_counter() - stopped)
    finally:
        stop.set()
        thread.join(timeout=30)
    return times


def main(argv: list[str] | None = None) -> int:
    parser = common.base_parser(__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=None, help="single enqueues per run (default 2000; 300 with --quick)")
    parser.add_argument("--repeat", type=int, default=3, help="alternated runs of each; the best of each side counts")
    parser.add_argument("--restarts", type=int, default=None, help="PgBouncer restarts under load (default 5; 2 with --quick)")
    args = parser.parse_args(argv)
    if PGBOUNCER is None:
        print("== poolers: skipped, the pgbouncer binary is not installed (apt-get install pgbouncer) ==")
        return 0
    n = args.jobs or (300 if args.quick else 2000)
    restarts = args.restarts or (2 if args.quick else 5)
    with common.postgres_server(args.database_url) as server_url:
        common.banner(f"poolers: {n:,} single enqueues, direct vs PgBouncer (transaction mode)", args, server_url)
        import queue_workflows
        from queue_workflows import bulk, db, node_queue

        url = common.qw_database(server_url)
        bouncer = PgBouncer(url, "transaction", pool_size=8)
        bouncer.start()
        rows = []
        try:
            def reset() -> None:
                with psycopg.connect(url, autocommit=True) as conn:
                    conn.execute("TRUNCATE ingest_jobs")

            def use(target: str) -> None:
                db.close_pools()
                queue_workflows.configure(database_url=target, ingest_queues=frozenset({"fetch"}), pool_max_size=8)
                eight_threads()  # opens the pool's connections (and PgBouncer's server ones) before the clock starts

            def one_thread() -> None:
                for i in range(n):
                    node_queue.enqueue_ingest_job("noop", "fetch", {"i": i})

            def eight_threads() -> None:
                with ThreadPoolExecutor(8) as pool:
                    list(pool.map(lambda i: node_queue.enqueue_ingest_job("noop", "fetch", {"i": i}), range(n)))

            def copy() -> None:
                bulk.copy_ingest_jobs([{"task_name": "noop", "queue": "fetch", "args": {"i": i}} for i in range(10 * n)])

            for name, run, count in (("enqueue_ingest_job, 1 thread", one_thread, n),
                                     ("enqueue_ingest_job, 8 threads", eight_threads, n),
                                     ("copy_ingest_jobs", copy, 10 * n)):
                direct, pooled = float("inf"), float("inf")
                for _ in range(args.repeat):  # alternated, best of each: the machine's noise hits both alike
                    use(url)
                    direct = min(direct, timed(reset, run))
                    use(bouncer.url)
                    pooled = min(pooled, timed(reset, run))
                assert common.scalar(url, "SELECT count(*) FROM ingest_jobs") == count
                rows.append([name, f"{count / direct:,.0f}", f"{count / pooled:,.0f}", common.ratio(pooled, direct)])
            use(bouncer.url)
            recovery = restart_recovery(bouncer, restarts)
        finally:
            db.close_pools()
            bouncer.close()
            common.drop_database(server_url, url)
    common.print_table(["enqueue", "direct jobs/s", "PgBouncer jobs/s", "PgBouncer time / direct time"], rows)
    print(f"PgBouncer restart under a producer loop, stop to next acknowledged enqueue ({restarts} restarts): "
          f"median {1000 * common.median(recovery):.0f} ms, max {1000 * max(recovery):.0f} ms")
    return 0


if __name__ == "__main__":
    sys.exit(main())
