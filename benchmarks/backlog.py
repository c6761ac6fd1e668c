"""Claim cost against the backlog: claim+complete rate with 1k, 100k and 1M jobs left queued.

Each round inserts M + B ready jobs (B the backlog that stays queued) on top of 1M finished
jobs retained from earlier, then times K worker processes (default mode) completing the first
M. The rate at 1M against the rate at 1k is the flatness figure (target >= 0.9). Before each
round the table is vacuumed and analysed, as autovacuum would have done by then. The plan of
one claim at the largest backlog is printed (`EXPLAIN (ANALYZE, BUFFERS)`, rolled back).
A last round repeats the smallest backlog while retention prunes the 1M finished rows (aged
past the window), as the leading orchestrator would: the claim rate while pruning runs.

    python benchmarks/backlog.py [--measure 10000] [--workers 2] [--backlogs 1000,100000,1000000]
"""

from __future__ import annotations

import sys

import common
import psycopg
from common import Procs

from queue_workflows import testing

FINISHED = 1_000_000


def insert(url: str, n: int, status: str) -> None:
    finished = "now()" if status == "completed" else "NULL"
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute(f"INSERT INTO ingest_jobs (task_name, queue, status, finished_at) "  # noqa: S608 - fixed literals
                     f"SELECT 'noop', 'fetch', %s, {finished} FROM generate_series(1, %s)", (status, n))


def explain_claim(url: str) -> str:
    from queue_workflows import jobstore, node_queue

    with psycopg.connect(url) as conn:
        statement, params = node_queue.claim_statement("ingest_jobs", "fetch", jobstore.Claimant("explain", 0))
        text = statement.as_string(conn)
        rows = conn.execute(f"EXPLAIN (ANALYZE, BUFFERS, COSTS OFF) {text}", params).fetchall()  # type: ignore[arg-type]
        conn.rollback()
    return "\n".join(f"      {r[0]}" for r in rows)


def round_trip(url: str, procs: Procs, workers: int, backlog: int, measure: int, finished: int) -> float:
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute("DELETE FROM ingest_jobs WHERE id > %s", (finished,))  # the previous round's jobs
        conn.execute("TRUNCATE worker_heartbeats")
    insert(url, measure + backlog, "queued")
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute("VACUUM ANALYZE ingest_jobs")
        start_id = conn.execute("SELECT min(id) FROM ingest_jobs WHERE status = 'queued'").fetchone()[0]  # type: ignore[index]
    env = common.qw_env(url)
    running = [procs.qw_worker(env) for _ in range(workers)]
    # The measured jobs are the first M inserted: poll only their id range, or the poll itself
    # would scan the backlog 50 times a second.
    measured = f"id BETWEEN {int(start_id)} AND {int(start_id) + measure - 1}"
    done = f"SELECT count(*) FROM ingest_jobs WHERE {measured} AND status = 'completed'"
    testing.wait_until(lambda: common.scalar(url, done) >= measure, timeout=600, interval=0.05, what="the measured jobs done")
    first = common.scalar(url, f"SELECT min(started_at) FROM ingest_jobs WHERE {measured}")
    last = common.scalar(url, f"SELECT max(finished_at) FROM ingest_jobs WHERE {measured}")
    procs.stop(running)
    return measure / (last - first).total_seconds()


def while_pruning(url: str, procs: Procs, workers: int, backlog: int, measure: int, finished: int) -> tuple[float, int]:
    """A round with `retention.Retention` deleting the aged finished rows in its 500-row batches meanwhile."""
    import threading

    from queue_workflows.leader import retention

    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute("UPDATE ingest_jobs SET finished_at = now() - interval '30 days' WHERE id <= %s", (finished,))
    stop = threading.Event()
    service = retention.Retention(stop_event=stop)
    thread = threading.Thread(target=service.run_forever, daemon=True)
    thread.start()
    try:
        rate = round_trip(url, procs, workers, backlog, measure, finished)
    finally:
        stop.set()
        thread.join(timeout=30)
    return rate, service.total


def main(argv: list[str] | None = None) -> int:
    parser = common.base_parser(__doc__.splitlines()[0])
    parser.add_argument("--measure", type=int, default=None, help="jobs timed per round (default 10000; 2000 with --quick)")
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--backlogs", default=None, help="default 1000,100000,1000000 (1000,10000,100000 with --quick)")
    args = parser.parse_args(argv)
    measure = args.measure or (2000 if args.quick else 10_000)
    backlogs = [int(x) for x in (args.backlogs or ("1000,10000,100000" if args.quick else "1000,100000,1000000")).split(",")]
    finished = FINISHED // 10 if args.quick else FINISHED
    rows, plan = [], ""
    with common.postgres_server(args.database_url) as server_url, Procs(args.keep_logs) as procs:
        common.banner(f"backlog: claim+complete rate with {backlogs} queued behind, {finished:,} finished retained, "
                      f"{args.workers} workers", args, server_url)
        url = common.qw_database(server_url)
        try:
            insert(url, finished, "completed")
            for backlog in backlogs:
                rate = round_trip(url, procs, args.workers, backlog, measure, finished)
                rows.append([f"{backlog:,}", f"{rate:,.0f}"])
                print(f"   {backlog:>9,} queued behind: {rate:,.0f} jobs/s", flush=True)
            plan = explain_claim(url)
            rate, pruned = while_pruning(url, procs, args.workers, backlogs[0], measure, finished)
            rows.append([f"{backlogs[0]:,} while pruning ({pruned:,} rows)", f"{rate:,.0f}"])
            print(f"   {backlogs[0]:>9,} queued, retention pruning: {rate:,.0f} jobs/s ({pruned:,} finished rows pruned meanwhile)", flush=True)
        finally:
            procs.stop(procs.started)
            from queue_workflows import db

            db.close_pools()
            common.drop_database(server_url, url)
    base = float(rows[0][1].replace(",", ""))
    common.print_table(["queued behind", "jobs/s", f"vs {backlogs[0]:,}"],
                       [[b, r, common.ratio(float(r.replace(",", "")), base)] for b, r in rows])
    print(f"\n   one claim at {backlogs[-1]:,} queued (EXPLAIN ANALYZE, BUFFERS):\n{plan}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
