"""Bulk enqueue: 100,000 jobs committed at once, queue_workflows vs pgqueuer, on one Postgres.

queue_workflows two ways, both validating every job (task registered, queue configured, args
a JSON object within the size limit) before writing: `enqueue_ingest_jobs` (one INSERT ...
unnest, the rows come back) and `bulk.copy_ingest_jobs` (one COPY, a count comes back). pgqueuer:
`SyncQueries.enqueue(entrypoints, payloads, priorities)` on psycopg, its bulk form (one INSERT ...
unnest). Each is timed from the call to its commit, best of `--repeat`, on an emptied table.

    python benchmarks/bulk_enqueue.py [--jobs 100000] [--repeat 3]
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable

import common
import psycopg
import systems


def best_of(repeat: int, reset: Callable[[], None], run: Callable[[], None]) -> float:
    best = float("inf")
    for _ in range(repeat):
        reset()
        started = time.perf_counter()
        run()
        best = min(best, time.perf_counter() - started)
    return best


def main(argv: list[str] | None = None) -> int:
    parser = common.base_parser(__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=None, help="jobs per enqueue (default 100000; 10000 with --quick)")
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args(argv)
    n = args.jobs or (10_000 if args.quick else 100_000)
    with common.postgres_server(args.database_url) as server_url:
        common.banner(f"bulk enqueue: {n:,} jobs in one call, committed", args, server_url)
        qw, pgq = systems.QueueWorkflows(server_url), systems.PgQueuer(server_url)
        qw.setup()
        pgq.setup()
        try:
            from queue_workflows import bulk, db, node_queue

            items = [{"task_name": "noop", "queue": "fetch", "args": {"i": i}} for i in range(n)]

            def qw_insert() -> None:
                with db.connect(url=qw.url) as conn, conn.transaction():
                    node_queue.enqueue_ingest_jobs(items, conn=conn)

            def qw_copy() -> None:
                with db.connect(url=qw.url) as conn, conn.transaction():
                    bulk.copy_ingest_jobs(items, conn=conn)

            def pgq_enqueue() -> None:
                with psycopg.connect(pgq.url, autocommit=True) as conn:
                    pgq._queries(conn).enqueue(["noop"] * n, [b'{"i": 0}'] * n, [0] * n)

            rows = [
                ["pgqueuer enqueue (baseline)", best_of(args.repeat, pgq.reset, pgq_enqueue)],
                ["queue_workflows enqueue_ingest_jobs", best_of(args.repeat, qw.reset, qw_insert)],
                ["queue_workflows copy_ingest_jobs", best_of(args.repeat, qw.reset, qw_copy)],
            ]
            assert common.scalar(qw.url, "SELECT count(*) FROM ingest_jobs") == n
        finally:
            qw.teardown()
            pgq.teardown()
            from queue_workflows import db

            db.close_pools()
    base = rows[0][1]
    common.print_table(["enqueue", "seconds", "jobs/s", "vs pgqueuer (>1: faster)"],
                       [[name, f"{s:.2f}", f"{n / s:,.0f}", common.ratio(base, s)] for name, s in rows])
    return 0


if __name__ == "__main__":
    sys.exit(main())
