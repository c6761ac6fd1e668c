"""Flow limits: rate-limit accuracy per key, and what 1,000 concurrency keys cost the claim over a large queue.

Rate: K keys limited to 10 starts/s each, a backlog of no-op jobs on every key, 8 worker
processes competing; starts per key are counted from the rows' started_at over the window
(after a warm-up that spends each bucket's first burst), and compared with 10/s.

Cost: a queue of N no-op jobs spread over 1,000 concurrency keys, each key limited to 2
running, against the same N jobs with no key and no limit, in the same run: W worker processes
claim and complete for a fixed window; the ratio of completions per second is the cost.

    python benchmarks/flow_limits.py [--queued 1000000] [--window 20] [--rate-window 60] [--workers 4] [--quick]
"""

from __future__ import annotations

import sys
import time

import psycopg
from common import Procs, banner, base_parser, drop_database, median, postgres_server, print_table, qw_database, qw_env, scalar
from psycopg import sql

RATE = 10  # starts per second per key
KEYS = 1000


def _wait_ready(url: str, procs: Procs, workers: list, timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while scalar(url, "SELECT count(*) FROM worker_heartbeats") < len(workers):
        procs.check_alive(workers)
        if time.monotonic() > deadline:
            raise RuntimeError("workers did not start")
        time.sleep(0.1)


def _backlog(url: str, n: int, *, keys: int | None) -> None:
    """N queued no-op jobs inserted in one statement; with `keys`, spread round robin over that many keys."""
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute("SET session_replication_role = replica")  # no NOTIFY per row: the workers start after
        conn.execute(
            "INSERT INTO ingest_jobs (task_name, queue, concurrency_key) "
            "SELECT 'noop', 'fetch', CASE WHEN %(keys)s::int IS NULL THEN NULL ELSE 'k' || (i %% %(keys)s::int) END "
            "FROM generate_series(1, %(n)s) AS i",
            {"n": n, "keys": keys},
        )
        conn.execute("VACUUM ANALYZE ingest_jobs")


def _completions(url: str) -> int:
    return int(scalar(url, "SELECT count(*) FROM ingest_jobs WHERE status = 'completed'"))


def cost_database(server_url: str, queued: int, *, keyed: bool) -> str:
    """A database with the backlog in place; keyed: 1,000 keys, each limited to 2 running."""
    from queue_workflows.ops.flow import set_flow_limit

    url = qw_database(server_url)
    _backlog(url, queued, keys=KEYS if keyed else None)
    if keyed:
        set_flow_limit("fetch", max_running=2)
    return url


def cost_round(url: str, args: object, *, window: float, workers: int) -> float:
    """Completions per second over `window` with `workers` processes, after a warm-up."""
    procs = Procs(keep_logs=getattr(args, "keep_logs", False))
    try:
        procs_start(procs, url, workers)
        time.sleep(2.0)  # warm-up: connections, plans, caches
        before, t0 = _completions(url), time.monotonic()
        time.sleep(window)
        return (_completions(url) - before) / (time.monotonic() - t0)
    finally:
        procs.stop(procs.started)


def procs_start(procs: Procs, url: str, workers: int) -> list:
    env = qw_env(url, QW_POLL_SECONDS="0.2")
    started = [procs.qw_worker(env) for _ in range(workers)]
    _wait_ready(url, procs, started)
    return started


def explain_claim(url: str) -> str:
    """EXPLAIN (ANALYZE, BUFFERS) of one claim, rolled back."""
    from queue_workflows.jobstore import Claimant
    from queue_workflows.node_queue import claim_statement

    statement, params = claim_statement("ingest_jobs", "fetch", Claimant("bench:explain", 1))
    with psycopg.connect(url) as conn:
        conn.execute(statement, params)  # a worker's session has planned its functions already: so does this one
        conn.rollback()
        rows = conn.execute(sql.SQL("EXPLAIN (ANALYZE, BUFFERS) ") + statement, params).fetchall()
        conn.rollback()
    return "\n".join(r[0] for r in rows)


def rate_case(server_url: str, args: object, *, keys: int, window: float, workers: int, warmup: float = 3.0) -> list[list[str]]:
    """Per key: starts counted over `window` after `warmup`, against RATE per second."""
    from queue_workflows import db
    from queue_workflows.ops.flow import set_flow_limit

    url = qw_database(server_url)
    procs = Procs(keep_logs=getattr(args, "keep_logs", False))
    try:
        per_key = int(RATE * (window + warmup + 10))
        _backlog(url, per_key * keys, keys=keys)
        set_flow_limit("fetch", rate=f"{RATE}/s")
        started = procs_start(procs, url, workers)
        t0 = scalar(url, "SELECT clock_timestamp()")
        time.sleep(warmup + window)
        procs.stop(started)
        rows = []
        with psycopg.connect(url) as conn:
            counts = conn.execute(
                "SELECT concurrency_key, count(*) FROM ingest_jobs WHERE started_at >= %(a)s + make_interval(secs => %(w)s) "
                "AND started_at < %(a)s + make_interval(secs => %(w)s + %(n)s) GROUP BY 1 ORDER BY 1",
                {"a": t0, "w": warmup, "n": window}).fetchall()
        for key, n in counts:
            achieved = n / window
            rows.append([key, f"{n}", f"{achieved:.2f}", f"{(achieved - RATE) / RATE * 100:+.1f} %"])
        return rows
    finally:
        procs.stop(procs.started)
        db.close_pools()
        drop_database(server_url, url)


def main(argv: list[str] | None = None) -> int:
    parser = base_parser(__doc__.splitlines()[0])
    parser.add_argument("--queued", type=int, default=1_000_000, help="jobs queued for the cost case")
    parser.add_argument("--window", type=float, default=20.0, help="seconds each cost case is measured")
    parser.add_argument("--rate-window", type=float, default=60.0, help="seconds the rate case is measured")
    parser.add_argument("--rate-keys", type=int, default=3, help="keys limited to 10/s each in the rate case")
    parser.add_argument("--workers", type=int, default=4, help="worker processes in the cost case (the rate case runs 8)")
    parser.add_argument("--rounds", type=int, default=3, help="alternated measurements of each cost case (median reported)")
    parser.add_argument("--explain", action="store_true", help="print the keyed claim's EXPLAIN (ANALYZE, BUFFERS)")
    args = parser.parse_args(argv)
    queued = 20_000 if args.quick else args.queued
    window = 5.0 if args.quick else args.window
    rate_window = 10.0 if args.quick else args.rate_window
    args.rounds = 1 if args.quick else args.rounds
    with postgres_server(args.database_url) as server_url:
        banner(f"flow limits: {RATE}/s per key with 8 workers; 1,000 keys over {queued:,} queued", args, server_url)
        rows = rate_case(server_url, args, keys=args.rate_keys, window=rate_window, workers=8)
        print(f"rate limit {RATE}/s per key, 8 workers, counted over {rate_window:.0f} s:")
        print_table(["key", "starts", "per second", "vs 10/s"], rows)
        urls = {keyed: cost_database(server_url, queued, keyed=keyed) for keyed in (False, True)}
        try:
            plan = explain_claim(urls[True])  # before the rounds: no dead entries at the index's head yet
            rates: dict[bool, list[float]] = {False: [], True: []}
            for _ in range(args.rounds):  # alternated, so drift on a shared machine hits both alike
                for keyed in (False, True):
                    rates[keyed].append(cost_round(urls[keyed], args, window=window, workers=args.workers))
        finally:
            from queue_workflows import db

            db.close_pools()
            for url in urls.values():
                drop_database(server_url, url)
        plain, keyed_rate = median(rates[False]), median(rates[True])
        print(f"claim+complete, {args.workers} workers, {queued:,} queued, {args.rounds} alternated rounds of {window:.0f} s (median):")
        print_table(["case", "jobs/s", "rounds", "vs no keys"], [
            ["no keys, no limit", f"{plain:.0f}", " ".join(f"{r:.0f}" for r in rates[False]), "1.00x"],
            [f"{KEYS:,} keys, max_running 2 each", f"{keyed_rate:.0f}", " ".join(f"{r:.0f}" for r in rates[True]), f"{keyed_rate / plain:.2f}x"],
        ])
        if args.explain:
            print("the keyed claim's plan:\n" + plan)
    return 0


if __name__ == "__main__":
    sys.exit(main())
