"""Claim latency with a backlog of backing-off jobs ahead of the ready ones.

Jobs waiting out a retry delay sit ahead of fresh work in claim order. If the claim index
does not serve the delay condition, every claim walks them all. This measures one claim
(one statement, one commit) with an empty table and behind N delayed jobs, and prints the ratio.

    python benchmarks/claim_backlog.py [--backlog 100000] [--claims 200]
"""

from __future__ import annotations

import sys
import time

import psycopg
from common import banner, base_parser, drop_database, median, percentile, postgres_server, print_table, qw_database


def _delayed_backlog(url: str, n: int) -> None:
    """N jobs that failed once and wait an hour for their retry, inserted the way a retry leaves them."""
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute(
            "INSERT INTO ingest_jobs (task_name, queue, attempts, run_after, priority) "
            "SELECT 'noop', 'fetch', 1, now() + interval '1 hour', 0 FROM generate_series(1, %s)",
            (n,),
        )
        conn.execute("UPDATE ingest_jobs SET error = 'RuntimeError: transient' WHERE attempts = 1")
        conn.execute("VACUUM ANALYZE ingest_jobs")


def _claim_latencies(url: str, claims: int) -> list[float]:
    from queue_workflows import node_queue
    from queue_workflows.jobstore import Claimant

    node_queue.enqueue_ingest_jobs({"task_name": "noop", "queue": "fetch"} for _ in range(claims))
    claimant = Claimant("bench:fetch:0:0", 1)
    samples = []
    with psycopg.connect(url, autocommit=True, row_factory=psycopg.rows.dict_row) as conn:
        for _ in range(claims):
            started = time.perf_counter()
            job = node_queue.claim_ingest_job("fetch", claimant, conn=conn)
            samples.append(time.perf_counter() - started)
            assert job is not None, "a ready job should have been claimed"
    return samples


def main(argv: list[str] | None = None) -> int:
    parser = base_parser(__doc__.splitlines()[0])
    parser.add_argument("--backlog", type=int, default=100_000, help="delayed jobs ahead of the ready ones")
    parser.add_argument("--claims", type=int, default=200, help="claims to time in each case")
    args = parser.parse_args(argv)
    backlog = 5_000 if args.quick else args.backlog
    rows = []
    with postgres_server(args.database_url) as server_url:
        banner(f"claim latency behind {backlog:,} backing-off jobs", args, server_url)
        results = {}
        for label, ahead in (("empty table", 0), (f"{backlog:,} delayed ahead", backlog)):
            url = qw_database(server_url)
            try:
                if ahead:
                    _delayed_backlog(url, ahead)
                results[label] = _claim_latencies(url, args.claims)
            finally:
                from queue_workflows import db

                db.close_pools()
                drop_database(server_url, url)
        base = median(results["empty table"])
        for label, samples in results.items():
            p50, p99 = median(samples), percentile(samples, 99)
            rows.append([label, f"{p50 * 1000:.2f}", f"{p99 * 1000:.2f}", f"{p50 / base:.2f}x"])
    print_table(["case", "p50 ms", "p99 ms", "p50 vs empty"], rows)
    return 0


if __name__ == "__main__":
    sys.exit(main())
