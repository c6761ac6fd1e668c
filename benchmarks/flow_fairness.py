"""Fair share: a small tenant's start latency behind another's backlog, served shares against weights, and the claim's cost with 100 tenants.

Real worker processes, no-op jobs, every figure on the database clock:
- latency: tenant B enqueues jobs at 10/s; B's enqueue -> start p50 on an empty queue (the
  baseline), behind tenant A's backlog with fair share, and behind the same backlog as FIFO (every
  job of one tenant: the claim order without tenants), in the same run;
- shares: three tenants weighted 1, 2 and 4 with backlogs, workers draining; each tenant's share
  of the jobs started in a window against its weight's share;
- cost: one connection's claim + completion loop (the one-job worker's statements, pipelined) over
  a large queue, jobs of 100 tenants against the same queue with no tenants; then the claim's plan,
  `EXPLAIN (ANALYZE, BUFFERS)` at that depth with 100 tenants.

    python benchmarks/flow_fairness.py [--workers 4] [--backlog 100000] [--large 1000000] [--quick]
"""

from __future__ import annotations

import sys
import time

import common
import psycopg
from common import Procs, median, percentile

WEIGHTS = {"w1": 1.0, "w2": 2.0, "w4": 4.0}


def _flood(url: str, n: int, tenants: int, prefix: str = "t") -> None:
    """`n` queued no-op jobs round-robin over `tenants` tenants (one: the default tenant), in one statement."""
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute(
            "INSERT INTO ingest_jobs (task_name, queue, reason, tenant) "
            "SELECT 'noop', 'fetch', 'bench', CASE WHEN %(k)s = 1 THEN %(p)s ELSE %(p)s || (i %% %(k)s) END "
            "FROM generate_series(1, %(n)s) AS i",
            {"n": n, "k": tenants, "p": prefix},
        )
        conn.execute("VACUUM ANALYZE ingest_jobs")


def _workers(procs: Procs, url: str, n: int) -> list:
    started = [procs.qw_worker(common.qw_env(url)) for _ in range(n)]
    deadline = time.monotonic() + 30
    while common.scalar(url, "SELECT count(*) FROM worker_heartbeats") < n:
        procs.check_alive(started)
        if time.monotonic() > deadline:
            raise RuntimeError("workers not ready in 30 s")
        time.sleep(0.05)
    return started


def latency(server_url: str, procs: Procs, workers: int, backlog: int, b_jobs: int, fair: bool, limit: float) -> tuple[list[float], bool]:
    """B's enqueue -> start seconds, B enqueueing at 10/s behind `backlog` jobs of A (as one tenant with B unless `fair`).

    A job of B not started `limit` seconds after the last enqueue counts as its wait so far, and
    the second value says so (the figure is then a lower bound)."""
    from queue_workflows import db, node_queue

    url = common.qw_database(server_url)
    started: list = []
    try:
        started = _workers(procs, url, workers)
        if backlog:
            _flood(url, backlog, 1, "A" if fair else "default")
        ids = []
        with db.connect(autocommit=True, url=url) as conn:
            for _ in range(b_jobs):
                ids.append(node_queue.enqueue_ingest_job("noop", "fetch", reason="bench", tenant="B" if fair else "default", conn=conn)["id"])
                time.sleep(0.1)
        deadline = time.monotonic() + limit
        while (left := common.scalar(url, "SELECT count(*) FROM ingest_jobs WHERE id = ANY(%s) AND started_at IS NULL", (ids,))):
            if time.monotonic() > deadline:
                break
            time.sleep(0.05)
        with psycopg.connect(url, autocommit=True) as conn:
            rows = conn.execute("SELECT extract(epoch FROM coalesce(started_at, clock_timestamp()) - created_at)::float "
                                "FROM ingest_jobs WHERE id = ANY(%s)", (ids,))
            return [r[0] for r in rows.fetchall()], left > 0
    finally:
        procs.stop(started)
        db.close_pools()
        common.drop_database(server_url, url)


def shares(server_url: str, procs: Procs, workers: int, backlog: int, window: float) -> dict[str, float]:
    """Each weighted tenant's share of the jobs started within `window` seconds, all three backlogged throughout."""
    from queue_workflows import db, set_tenant_weight

    url = common.qw_database(server_url)
    started: list = []
    try:
        for tenant, weight in WEIGHTS.items():
            set_tenant_weight(tenant, weight)
            _flood(url, backlog, 1, tenant)
        started = _workers(procs, url, workers)
        time.sleep(1.0)  # past the workers' first claims
        t0 = common.scalar(url, "SELECT clock_timestamp()")
        time.sleep(window)
        t1 = common.scalar(url, "SELECT clock_timestamp()")
        with psycopg.connect(url, autocommit=True) as conn:
            rows = conn.execute("SELECT tenant, count(*) FROM ingest_jobs WHERE started_at BETWEEN %s AND %s GROUP BY tenant", (t0, t1))
            counts = dict(rows.fetchall())
        if any(common.scalar(url, "SELECT count(*) FROM ingest_jobs WHERE status = 'queued' AND tenant = %s", (t,)) == 0 for t in WEIGHTS):
            raise RuntimeError("a tenant ran dry inside the window: raise --backlog")
        total = sum(counts.values())
        return {t: counts.get(t, 0) / total for t in WEIGHTS} | {"jobs": float(total)}
    finally:
        procs.stop(started)
        db.close_pools()
        common.drop_database(server_url, url)


def claim_rates(server_url: str, depth: int, seconds: float, rounds: int = 5) -> tuple[float, float, str]:
    """Claim + completion per second on one connection over `depth` queued jobs, with no tenants and
    with 100, alternating short rounds so both see the same machine; and the 100-tenant claim's plan."""
    from queue_workflows import db, jobstore, node_queue

    urls = [common.qw_database(server_url), common.qw_database(server_url)]
    try:
        for url, tenants in zip(urls, (1, 100)):
            _flood(url, depth, tenants)
        done, spent = [0, 0], [0.0, 0.0]
        claimant = jobstore.Claimant("bench", 1)
        claim = node_queue.claim_statements(node_queue.INGEST_TABLE, "fetch", claimant)
        for _ in range(rounds):
            for k, url in enumerate(urls):
                with db.connect(autocommit=True, url=url) as conn:
                    job = db.one_round_trip(conn, claim)[-1].fetchone()
                    begun = time.perf_counter()
                    while job is not None and time.perf_counter() - begun < seconds / rounds:
                        mark = jobstore.mark_statement(node_queue.INGEST_TABLE, "completed", job["id"], result=None, worker_id="bench")
                        job = db.one_round_trip(conn, [mark, *claim])[-1].fetchone()
                        done[k] += 1
                    spent[k] += time.perf_counter() - begun
        with db.connect(autocommit=True, url=urls[1]) as conn, conn.transaction(force_rollback=True):
            query, params = claim[-1]
            rows = conn.execute(b"EXPLAIN (ANALYZE, BUFFERS) " + query.as_bytes(conn), params).fetchall()  # type: ignore[union-attr]
        return done[0] / spent[0], done[1] / spent[1], "\n".join(r["QUERY PLAN"] for r in rows)
    finally:
        db.close_pools()
        for url in urls:
            common.drop_database(server_url, url)


def main(argv: list[str] | None = None) -> int:
    parser = common.base_parser(__doc__.splitlines()[0])
    parser.add_argument("--workers", type=int, default=None, help="worker processes (default 4; 2 with --quick)")
    parser.add_argument("--backlog", type=int, default=None, help="tenant A's backlog (default 100000; 10000 with --quick)")
    parser.add_argument("--large", type=int, default=None, help="queue depth of the cost run (default 1000000; 100000 with --quick)")
    parser.add_argument("--only-cost", action="store_true", help="only the cost run and the plan")
    args = parser.parse_args(argv)
    workers = args.workers or (2 if args.quick else 4)
    backlog = args.backlog or (10_000 if args.quick else 100_000)
    large = args.large or (100_000 if args.quick else 1_000_000)
    b_jobs = 30 if args.quick else 100
    window = 3.0 if args.quick else 10.0

    with common.postgres_server(args.database_url) as server_url, Procs(args.keep_logs) as procs:
        common.banner(f"fair share: {workers} workers; A's backlog {backlog}, B {b_jobs} jobs at 10/s; cost over {large} queued", args, server_url)
        if args.only_cost:
            plain, spread, plan = claim_rates(server_url, large, 5.0 if args.quick else 10.0)
            print(f"   claim + completion over {large} queued: no tenants {plain:,.0f}/s, 100 tenants {spread:,.0f}/s "
                  f"({common.ratio(spread, plain)})\n")
            print("\n".join("      " + line for line in plan.splitlines()))
            return 0
        limit = 60.0 if args.quick else 120.0
        empty, _ = latency(server_url, procs, workers, 0, b_jobs, fair=True, limit=limit)
        fair, _ = latency(server_url, procs, workers, backlog, b_jobs, fair=True, limit=limit)
        fifo, cut = latency(server_url, procs, workers, backlog, b_jobs, fair=False, limit=limit)
        share = shares(server_url, procs, workers, backlog // 2, window)
        plain, spread, plan = claim_rates(server_url, large, 5.0 if args.quick else 10.0)

    base = median(empty)
    common.print_table(
        ["B's enqueue -> start (database clock)", "jobs", "p50 ms", "p99 ms", "p50 vs empty queue"],
        [
            ["empty queue (baseline)", len(empty), f"{base * 1000:.1f}", f"{percentile(empty, 99) * 1000:.1f}", "1.00x"],
            [f"behind A's {backlog} jobs, fair share", len(fair), f"{median(fair) * 1000:.1f}", f"{percentile(fair, 99) * 1000:.1f}",
             common.ratio(median(fair), base)],
            [f"behind A's {backlog} jobs, FIFO (one tenant)" + (f", cut at {limit:.0f} s" if cut else ""), len(fifo),
             f"{'>' if cut else ''}{median(fifo) * 1000:.1f}", f"{'>' if cut else ''}{percentile(fifo, 99) * 1000:.1f}",
             ("> " if cut else "") + common.ratio(median(fifo), base)],
        ],
    )
    print()
    total = sum(WEIGHTS.values())
    errors = {t: abs(share[t] - w / total) / (w / total) for t, w in WEIGHTS.items()}
    common.print_table(
        ["tenant", "weight", "weight share", f"served share ({share['jobs']:.0f} jobs in {window:.0f} s)", "off by"],
        [[t, f"{w:g}", f"{w / total:.1%}", f"{share[t]:.1%}", f"{errors[t]:.1%}"] for t, w in WEIGHTS.items()],
    )
    print()
    common.print_table(
        [f"claim + completion, one connection, {large} queued", "jobs/s", "vs no tenants"],
        [["no tenants (baseline)", f"{plain:,.0f}", "1.00x"], ["100 tenants, fair share", f"{spread:,.0f}", common.ratio(spread, plain)]],
    )
    print(f"\n   the claim's plan at {large} queued, 100 tenants:\n")
    print("\n".join("      " + line for line in plan.splitlines()))
    # The targets (docs/flow_control.md): B's p50 within 2x of the empty queue's, shares within 5 %, cost >= 0.8x.
    ok = median(fair) <= 2 * base and max(errors.values()) <= 0.05 and spread >= 0.8 * plain
    print(f"\n   targets {'met' if ok else 'MISSED'}: fair p50 <= 2x empty, every share within 5 % of its weight's, 100 tenants >= 0.8x")
    return 0


if __name__ == "__main__":
    sys.exit(main())
