"""Child workflows: the hand-off down a 200-deep chain of child runs and back up, against a flat chain.

Real processes: one orchestrator and K cpu claim workers. Link i of the chain is a workflow of
three nodes: a no-op `step`, a child-workflow node `next` that starts link i+1, and a no-op
`after` once that child has ended; the leaf is its `step` alone. On the database clock:
- down: the parent's `step` done -> the child run started and its own `step` claimable (one
  drain transaction reaches `next` and starts the child);
- up: the child run ended -> the parent's `after` claimable (the child's end completes `next` in
  its transaction; its outbox event then enqueues `after`);
- a flat chain of the same depth (one no-op node per level) measured in the same run: its
  node done -> next node claimable, and its wall time; node transitions per second of both.

    python benchmarks/dag_child.py [--workers 4] [--depth 200] [--quick]
"""

from __future__ import annotations

import sys
import time
from typing import Any

import common
import psycopg
from common import Procs, median, percentile
from psycopg.rows import dict_row

from queue_workflows import testing

CALL = "bench_app:dag_step"
DOWN = """
SELECT extract(epoch FROM cs.created_at - ps.finished_at)::float AS gap
  FROM workflow_runs c
  JOIN workflow_node_jobs cs ON cs.run_id = c.id AND cs.node_name = 'step'
  JOIN workflow_node_jobs ps ON ps.run_id = c.parent_run_id AND ps.node_name = 'step'
 WHERE c.id = ANY(%s)
"""
UP = """
SELECT extract(epoch FROM pa.created_at - c.finished_at)::float AS gap
  FROM workflow_runs c
  JOIN workflow_node_jobs pa ON pa.run_id = c.parent_run_id AND pa.node_name = 'after'
 WHERE c.id = ANY(%s)
"""
FLAT = """
SELECT extract(epoch FROM c.created_at - p.finished_at)::float AS gap
  FROM workflow_node_jobs c JOIN workflow_node_jobs p ON p.run_id = c.run_id AND p.node_name = 's' || (substr(c.node_name, 2)::int - 1)
 WHERE c.run_id = %s AND c.node_name <> 's0'
"""
TREE = """
WITH RECURSIVE tree AS (SELECT id FROM workflow_runs WHERE parent_run_id = %s
                        UNION ALL SELECT r.id FROM workflow_runs r JOIN tree t ON r.parent_run_id = t.id)
SELECT array_agg(id) AS ids FROM tree
"""


def flat(depth: int) -> dict[str, Any]:
    return {"name": f"flat{depth}", "nodes": [{"id": f"s{i}", "call": CALL, "deps": [f"s{i - 1}"] if i else []} for i in range(depth)]}


class Bench:
    def __init__(self, url: str, procs: Procs, workers: int, depth: int) -> None:
        self.conn = psycopg.connect(url, autocommit=True, row_factory=dict_row)
        env = common.qw_env(url, QW_MAX_WORKFLOW_DEPTH=str(depth), QW_MAX_CHILD_RUNS="10")
        procs.qw_orchestrator(env)
        self.workers = [procs.qw_worker(env, "cpu") for _ in range(workers)]
        testing.wait_until(lambda: self.scalar("SELECT count(*) AS n FROM worker_heartbeats") >= workers, timeout=60, what="workers ready")

    def scalar(self, query: str, *params: Any) -> Any:
        row = self.conn.execute(query, params).fetchone()  # type: ignore[arg-type]
        return next(iter(row.values())) if row else None

    def run(self, workflow: Any, timeout: float) -> tuple[int, float]:
        from queue_workflows import start_run

        started = time.perf_counter()
        run_id = start_run(workflow, {})
        testing.wait_until(lambda: self.scalar("SELECT status FROM workflow_runs WHERE id = %s", run_id) != "running",
                           timeout=timeout, interval=0.005, what=f"run {run_id} finished")
        wall = time.perf_counter() - started
        status = self.scalar("SELECT status, error FROM workflow_runs WHERE id = %s", run_id)
        assert status == "completed", f"run {run_id} ended {status}: {self.scalar('SELECT error FROM workflow_runs WHERE id = %s', run_id)}"
        return run_id, wall

    def gaps(self, query: str, *params: Any) -> list[float]:
        return [r["gap"] for r in self.conn.execute(query, params).fetchall()]  # type: ignore[arg-type]

    def transitions(self, run_ids: list[int]) -> int:
        return int(self.scalar("SELECT count(*) FROM workflow_node_jobs WHERE run_id = ANY(%s) AND status = 'completed'", run_ids))


def main(argv: list[str] | None = None) -> int:
    parser = common.base_parser(__doc__.splitlines()[0])
    parser.add_argument("--workers", type=int, default=4)
    parser.add_argument("--depth", type=int, default=None, help="chain depth (default 200; 50 with --quick)")
    args = parser.parse_args(argv)
    depth = args.depth or (50 if args.quick else 200)
    with common.postgres_server(args.database_url) as server_url, Procs(args.keep_logs) as procs:
        common.banner(f"Child workflows: a {depth}-deep chain of child runs against a flat {depth}-step chain, {args.workers} workers",
                      args, server_url)
        url = common.qw_database(server_url)
        try:
            import queue_workflows

            queue_workflows.configure(database_url=url, ingest_queues=frozenset({"fetch"}), node_packages=frozenset({"bench_app"}),
                                      max_workflow_depth=depth)
            bench = Bench(url, procs, args.workers, depth)
            flat_id, flat_wall = bench.run(flat(depth), timeout=300)
            flat_gaps = bench.gaps(FLAT, flat_id)
            top, child_wall = bench.run(f"child_chain_0_{depth}", timeout=600)
            below = bench.scalar(TREE, top)
            assert len(below) == depth, f"{len(below)} child runs, not {depth}"
            down, up = bench.gaps(DOWN, below), bench.gaps(UP, below)
            child_transitions, flat_transitions = bench.transitions([top, *below]), bench.transitions([flat_id])
            bench.conn.close()
        finally:
            procs.stop(procs.started)
            from queue_workflows import db

            db.close_pools()
            common.drop_database(server_url, url)
    common.print_table(
        ["hand-off (database clock)", "count", "p50 ms", "p99 ms", "p50 vs flat"],
        [
            [f"flat {depth}-step chain: node done -> next claimable (baseline)", len(flat_gaps), f"{median(flat_gaps) * 1000:.1f}",
             f"{percentile(flat_gaps, 99) * 1000:.1f}", "1.00x"],
            ["down: parent's step done -> child's first node claimable", len(down), f"{median(down) * 1000:.1f}",
             f"{percentile(down, 99) * 1000:.1f}", common.ratio(median(down), median(flat_gaps))],
            ["up: child run ended -> parent's dependant claimable", len(up), f"{median(up) * 1000:.1f}",
             f"{percentile(up, 99) * 1000:.1f}", common.ratio(median(up), median(flat_gaps))],
        ],
    )
    print()
    common.print_table(
        ["chain", "wall s", "node transitions", "per second", "wall vs flat"],
        [
            [f"flat, {depth} steps (baseline)", f"{flat_wall:.2f}", flat_transitions, f"{flat_transitions / flat_wall:.0f}", "1.00x"],
            [f"{depth} nested child runs (step, next, after each)", f"{child_wall:.2f}", child_transitions,
             f"{child_transitions / child_wall:.0f}", common.ratio(child_wall, flat_wall)],
        ],
    )
    # The bound: each way, a hand-off to or from a child run costs at most what three plain ones do, plus 10 ms of slack.
    assert median(down) <= 3 * median(flat_gaps) + 0.010, "child start slower than 3 plain hand-offs"
    assert median(up) <= 3 * median(flat_gaps) + 0.010, "child end slower than 3 plain hand-offs"
    return 0


if __name__ == "__main__":
    sys.exit(main())
