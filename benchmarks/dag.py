"""DAG dispatch overhead: from a node's completion commit to its dependant's claim.

Real processes: one orchestrator (its outbox drain wakes on NOTIFY) and K cpu claim workers.
- a 200-step chain: the gap between each step's `finished_at` and the next step's
  `started_at`, both on the database clock (p50/p99);
- a ~1,000-node layered DAG (a root fanning out to 111 nodes, 9 layers, each node fed by two of
  the layer before, and a sink gathering the last layer): the same gaps, and its wall time
  against the same number of independent no-op node jobs drained by the same workers (the
  ratio is the price of the graph);
- for both, node transitions per second: nodes that completed and handed on to their
  dependants, over the run's span on the database clock (first node created to last finished).

    python benchmarks/dag.py [--workers 4] [--chain 200] [--quick]
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
GAPS = """
SELECT extract(epoch FROM c.started_at - max(p.finished_at))::float AS gap,
       extract(epoch FROM c.created_at - max(p.finished_at))::float AS dispatched
  FROM workflow_node_jobs c
  JOIN LATERAL jsonb_array_elements_text(
         (SELECT n -> 'deps' FROM workflow_runs r, jsonb_array_elements(r.definition -> 'nodes') n
           WHERE r.id = c.run_id AND n ->> 'id' = c.node_name)) AS d(dep) ON true
  JOIN workflow_node_jobs p ON p.run_id = c.run_id AND p.node_name = d.dep
 WHERE c.run_id = %s
 GROUP BY c.id, c.started_at, c.created_at
"""

SPAN = """
SELECT count(*) AS n, extract(epoch FROM max(finished_at) - min(created_at))::float AS span
  FROM workflow_node_jobs
 WHERE run_id = %s
"""


def chain(n: int) -> dict[str, Any]:
    return {"name": f"chain{n}", "nodes": [{"id": f"s{i}", "call": CALL, "deps": [f"s{i - 1}"] if i else []} for i in range(n)]}


def layered(width: int = 111, layers: int = 9) -> dict[str, Any]:
    nodes = [{"id": "root", "call": CALL}]
    previous = ["root"]
    for k in range(1, layers + 1):
        names = [f"l{k}n{j}" for j in range(width)]
        for j, name in enumerate(names):
            deps = previous if len(previous) == 1 else [previous[j], previous[(j + 1) % width]]
            nodes.append({"id": name, "call": CALL, "deps": deps})
        previous = names
    nodes.append({"id": "sink", "call": CALL, "deps": previous})
    return {"name": "layered", "nodes": nodes}


class Bench:
    def __init__(self, url: str, procs: Procs, workers: int) -> None:
        self.url = url
        self.conn = psycopg.connect(url, autocommit=True, row_factory=dict_row)
        env = common.qw_env(url)
        procs.qw_orchestrator(env)
        self.workers = [procs.qw_worker(env, "cpu") for _ in range(workers)]
        testing.wait_until(lambda: self.scalar("SELECT count(*) AS n FROM worker_heartbeats") >= workers, timeout=60, what="workers ready")

    def scalar(self, query: str, *params: Any) -> Any:
        row = self.conn.execute(query, params).fetchone()  # type: ignore[arg-type]
        return next(iter(row.values())) if row else None

    def run(self, definition: dict[str, Any], timeout: float) -> tuple[float, list[float], list[float], float]:
        from queue_workflows import start_run

        started = time.perf_counter()
        run_id = start_run(definition, {})
        testing.wait_until(lambda: self.scalar("SELECT status FROM workflow_runs WHERE id = %s", run_id) != "running",
                           timeout=timeout, interval=0.005, what=f"run {run_id} finished")
        wall = time.perf_counter() - started
        status = self.scalar("SELECT status FROM workflow_runs WHERE id = %s", run_id)
        assert status == "completed", f"run {run_id} ended {status}"
        once = self.scalar("SELECT count(*) = count(DISTINCT node_name) FROM workflow_node_jobs WHERE run_id = %s", run_id)
        assert once, "a node ran twice"
        rows = self.conn.execute(GAPS, (run_id,)).fetchall()
        span = self.conn.execute(SPAN, (run_id,)).fetchone()
        assert span is not None
        return wall, [r["gap"] for r in rows], [r["dispatched"] for r in rows], span["n"] / span["span"]

    def independent(self, n: int, timeout: float) -> float:
        from queue_workflows import node_queue

        started = time.perf_counter()
        with psycopg.connect(self.url) as conn, conn.transaction():
            ids = [node_queue.enqueue_node_job("solo", "cpu", node_module="bench_app", conn=conn)["id"] for _ in range(n)]
        testing.wait_until(lambda: self.scalar("SELECT count(*) FROM workflow_node_jobs WHERE id = ANY(%s) AND status = 'completed'", ids) == n,
                           timeout=timeout, interval=0.005, what="independent jobs done")
        return time.perf_counter() - started


def main(argv: list[str] | None = None) -> int:
    parser = common.base_parser(__doc__.splitlines()[0])
    parser.add_argument("--workers", type=int, default=4)
    parser.add_argument("--chain", type=int, default=None, help="chain length (default 200; 50 with --quick)")
    args = parser.parse_args(argv)
    length = args.chain or (50 if args.quick else 200)
    width, layers = (20, 4) if args.quick else (111, 9)
    rows = []
    with common.postgres_server(args.database_url) as server_url, Procs(args.keep_logs) as procs:
        common.banner(f"DAG dispatch: {length}-step chain and a {1 + width * layers + 1}-node layered DAG, {args.workers} workers", args, server_url)
        url = common.qw_database(server_url)
        try:
            bench = Bench(url, procs, args.workers)
            chain_wall, chain_gaps, chain_dispatch, chain_rate = bench.run(chain(length), timeout=300)
            dag = layered(width, layers)
            dag_wall, dag_gaps, dag_dispatch, dag_rate = bench.run(dag, timeout=600)
            solo_wall = bench.independent(len(dag["nodes"]), timeout=600)
            bench.conn.close()
        finally:
            procs.stop(procs.started)
            from queue_workflows import db

            db.close_pools()
            common.drop_database(server_url, url)
    for label, gaps, dispatch, rate in (
        (f"{length}-step chain", chain_gaps, chain_dispatch, chain_rate),
        (f"{len(dag['nodes'])}-node layered DAG", dag_gaps, dag_dispatch, dag_rate),
    ):
        rows.append([label, len(gaps), f"{median(dispatch) * 1000:.1f}", f"{percentile(dispatch, 99) * 1000:.1f}",
                     f"{median(gaps) * 1000:.1f}", f"{percentile(gaps, 99) * 1000:.1f}", f"{rate:.0f}"])
    common.print_table(["completion of the last dependency ->", "steps", "enqueued p50 ms", "p99", "claimed p50 ms", "p99", "transitions/s"], rows)
    print("   (claimed includes waiting for a free worker when a layer is wider than the pool;")
    print("    transitions/s: nodes done and handed on per second of the run, on the database clock)")
    print()
    common.print_table(
        ["wall time", "seconds", "vs independent jobs"],
        [
            [f"{len(dag['nodes'])} independent node jobs (baseline)", f"{solo_wall:.2f}", "1.00x"],
            ["the same nodes as a layered DAG", f"{dag_wall:.2f}", common.ratio(dag_wall, solo_wall)],
            [f"{length}-step chain", f"{chain_wall:.2f}", "-"],
        ],
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
