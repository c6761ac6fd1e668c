"""A gpu worker's routed claim as the gpu backlog grows: 300, 3,000 and 30,000 queued jobs.

Four models, each one's jobs enqueued in a block (the depth is what is left once the timed
claims took theirs); another live gpu worker holds one of them warm, so the plan must count
that model's queue for the second-copy rule. The worker's own
transaction is timed, as it sends it: the last job's completion, the turn-taking prelude and
the next claim in one pipelined commit, on one connection; then the claim statement alone, on
the server (EXPLAIN ANALYZE's execution time, rolled back).

    python benchmarks/gpu_claim.py [--depths 300,3000,30000] [--claims 200]
"""

from __future__ import annotations

import sys
import time

import psycopg
from common import banner, base_parser, drop_database, median, percentile, postgres_server, print_table, qw_database

MODELS = ("m0", "m1", "m2", "m3")


def _fill(conn: psycopg.Connection, depth: int, claims: int) -> None:
    """`depth` queued jobs once the timed claims have taken theirs (all from m3, the warm model)."""
    for model in MODELS:
        extra = claims + 1 if model == "m3" else 0
        conn.execute("INSERT INTO workflow_node_jobs (node_name, queue, required_model) "
                     "SELECT 'n' || g, 'gpu', %s FROM generate_series(1, %s) AS g", (model, depth // len(MODELS) + extra))
    conn.execute("VACUUM ANALYZE workflow_node_jobs")


def _timed_claims(conn: psycopg.Connection, claims: int) -> list[float]:
    from queue_workflows import db, jobstore, node_queue

    me = jobstore.Claimant("bench-gpu-0", 1)

    def statements() -> list[jobstore.Statement]:
        return node_queue.claim_statements(node_queue.NODE_TABLE, "gpu", me, current_model="m3", loaded_models=["m3"], vram_available_gb=None)

    job = db.one_round_trip(conn, statements())[-1].fetchone()
    samples = []
    for _ in range(claims):
        started = time.perf_counter()
        mark = jobstore.mark_statement(node_queue.NODE_TABLE, "completed", job["id"], worker_id=me.worker_id)
        job = db.one_round_trip(conn, [mark, *statements()])[-1].fetchone()
        samples.append(time.perf_counter() - started)
        assert job is not None and job["required_model"] == "m3", "the warm model's next job"
    return samples


def _server_times(conn: psycopg.Connection, claims: int) -> list[float]:
    """The routed claim's own execution time on the server (EXPLAIN ANALYZE, rolled back): what the
    statement costs, without the client, the network or the commit, which dominate on a busy box."""
    from queue_workflows import jobstore, node_queue

    query, params = node_queue.claim_statement(node_queue.NODE_TABLE, "gpu", jobstore.Claimant("bench-gpu-0", 1),
                                               current_model="m3", loaded_models=["m3"], vram_available_gb=None)
    samples = []
    for _ in range(claims):
        with conn.transaction(force_rollback=True):
            conn.execute("SELECT set_config('plan_cache_mode', 'force_generic_plan', true)")
            (plan,) = conn.execute(psycopg.sql.SQL("EXPLAIN (ANALYZE, TIMING OFF, FORMAT JSON) ") + query, params).fetchone().values()
        samples.append(plan[0]["Execution Time"] / 1000)
    return samples


def main(argv: list[str] | None = None) -> int:
    parser = base_parser(__doc__.splitlines()[0])
    parser.add_argument("--depths", default=None, help="queued gpu jobs, comma separated (default 300,3000,30000)")
    parser.add_argument("--claims", type=int, default=200, help="claims to time at each depth")
    args = parser.parse_args(argv)
    depths = [int(d) for d in (args.depths or ("300,3000" if args.quick else "300,3000,30000")).split(",")]
    rows, base = [], None
    with postgres_server(args.database_url) as server_url:
        banner(f"gpu claim: completion + routed claim per commit, {', '.join(f'{d:,}' for d in depths)} queued", args, server_url)
        from queue_workflows import db
        from queue_workflows.jobstore import WORKER_LOCK_NAMESPACE

        for depth in depths:
            url = qw_database(server_url)
            try:
                with psycopg.connect(url, autocommit=True) as other, \
                        psycopg.connect(url, autocommit=True, row_factory=psycopg.rows.dict_row) as conn:
                    other.execute("SELECT pg_advisory_lock_shared(%s, 2)", (WORKER_LOCK_NAMESPACE,))
                    other.execute("INSERT INTO worker_heartbeats (worker_id, host_label, queue, pid, lock_key, loaded_models) "
                                  "VALUES ('bench-gpu-1', 'bench', 'gpu', 1, 2, '{m1}')")
                    conn.execute("SELECT pg_advisory_lock_shared(%s, 1)", (WORKER_LOCK_NAMESPACE,))
                    _fill(conn, depth, args.claims)
                    samples = _timed_claims(conn, args.claims)
                    server = _server_times(conn, args.claims)
            finally:
                db.close_pools()
                drop_database(server_url, url)
            p50 = median(samples)
            base = base or p50
            rows.append([f"{depth:,}", f"{p50 * 1000:.2f}", f"{percentile(samples, 99) * 1000:.2f}", f"{p50 / base:.2f}x",
                         f"{median(server) * 1000:.3f}", f"{min(server) * 1000:.3f}"])
            print(f"   {depth:,} queued: p50 {p50 * 1000:.2f} ms, the claim's server time p50 {median(server) * 1000:.3f} ms", flush=True)
    print_table(["queued gpu jobs", "p50 ms", "p99 ms", f"p50 vs {depths[0]:,}", "server p50 ms", "server min ms"], rows)
    print("   Each sample is one commit: the completion, the claim's turn and the next routed claim (docs/gpu.md).")
    return 0


if __name__ == "__main__":
    sys.exit(main())
