"""Model affinity: makespan and model loads of a mixed gpu backlog, routed vs plain FIFO vs the lower bound.

Three gpu worker processes in CPU-fallback mode, one model slot each; four models whose loader
sleeps `--load` seconds (1.5); N short node jobs (`--job` seconds) in random model order, all
enqueued at once. For each mix: this engine (warm models first, a model's jobs left to its
holder until its queue is deep), plain FIFO (`QW_GPU_ROUTING=fifo`, same workers), and the lower
bound (all the work plus one load of each model used, spread over the workers), and the best
schedule (the least makespan of any schedule with zero overhead: schedule_bound.py). Loads are
counted from the jobs' `model_hit`; makespan on the database clock, from just before the
enqueue's COMMIT (when the backlog becomes visible) to the last job's end. Mixes: uniform, one
hot model, and one model (m3) too big for all but one worker.

    python benchmarks/affinity.py [--jobs 300] [--workers 3] [--quick]
"""

from __future__ import annotations

import random
import sys

import common
import psycopg
from common import Procs
from schedule_bound import best_makespan

from queue_workflows import testing

MIXES = {
    "uniform": [0.25, 0.25, 0.25, 0.25],
    "one hot model": [0.7, 0.1, 0.1, 0.1],
    "m3 too big": [0.25, 0.25, 0.25, 0.25],
}
# The "too big" mix: m3 needs 24 GB; the first worker has 24 GB free, the others 10 (18 with their
# own 8 GB model given back), so only the first may ever load m3.
BIG_VRAM_GB = 24.0
SMALL_FREE_GB = 10.0


def backlog(weights: list[float], jobs: int, seed: int) -> list[str]:
    """The models of the mix's jobs, in enqueue order."""
    return random.Random(seed).choices(["m0", "m1", "m2", "m3"], weights=weights, k=jobs)


def best_schedule(weights: list[float], *, jobs: int, workers: int, job_seconds: float, load: float, seed: int, big: bool) -> float:
    """The least makespan any schedule of this very backlog could have (schedule_bound.py)."""
    models = backlog(weights, jobs, seed)
    work = {m: models.count(m) * job_seconds for m in set(models)}
    return best_makespan(work, load, workers, may_load={"m3": {0}} if big else None)


def run_mix(url: str, procs: Procs, weights: list[float], *, jobs: int, workers: int, job_seconds: float, load: float,
            routing: str, seed: int, timeout: float, big: bool = False) -> tuple[float, int, int] | None:
    from queue_workflows import db, node_queue

    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute("TRUNCATE workflow_node_jobs, worker_heartbeats RESTART IDENTITY CASCADE")
    env = common.qw_env(url, QW_APP="bench_gpu", QW_GPU_CPU_FALLBACK="1", QW_GPU_ROUTING=routing,
                        QW_HEARTBEAT_SECONDS="1", BENCH_LOAD_SECONDS=str(load))
    if big:
        env["BENCH_BIG_VRAM_GB"] = str(BIG_VRAM_GB)
        envs = [dict(env, QW_GPU_FREE_VRAM_GB=str(BIG_VRAM_GB if i == 0 else SMALL_FREE_GB)) for i in range(workers)]
    else:
        envs = [env] * workers
    running = [procs.qw_worker(e, "gpu") for e in envs]
    try:
        testing.wait_until(lambda: common.scalar(url, "SELECT count(*) FROM worker_heartbeats") >= workers, timeout=60, what="workers")
        models = backlog(weights, jobs, seed)
        with db.connect(url=url) as conn, conn.transaction():
            for i, m in enumerate(models):
                node_queue.enqueue_node_job(f"j{i}", "gpu", node_module="bench_gpu", required_model=m,
                                            inputs={"sleep": job_seconds}, conn=conn)
            # No job is visible before the COMMIT: the makespan starts here, just before it.
            visible_from = conn.execute("SELECT clock_timestamp() AS t").fetchone()["t"]
        try:
            testing.wait_until(lambda: common.scalar(url, "SELECT count(*) FROM workflow_node_jobs WHERE status = 'completed'") == jobs,
                               timeout=timeout, interval=0.1, what="the backlog done")
        except TimeoutError:
            return None
        span = common.scalar(url, "SELECT extract(epoch FROM max(finished_at) - %s) FROM workflow_node_jobs", (visible_from,))
        loads = common.scalar(url, "SELECT count(*) FROM workflow_node_jobs WHERE model_hit = false")
        m3_on = common.scalar(url, "SELECT count(DISTINCT claimed_by) FROM workflow_node_jobs WHERE required_model = 'm3'")
        return float(span), int(loads), int(m3_on)
    finally:
        procs.stop(running)


def main(argv: list[str] | None = None) -> int:
    parser = common.base_parser(__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=None, help="default 300; 40 with --quick")
    parser.add_argument("--workers", type=int, default=3)
    parser.add_argument("--load", type=float, default=None, help="seconds a model takes to load (default 1.5; 0.5 with --quick)")
    parser.add_argument("--job", type=float, default=0.05, help="seconds a job runs")
    parser.add_argument("--timeout", type=float, default=600)
    args = parser.parse_args(argv)
    jobs = args.jobs or (40 if args.quick else 300)
    args.load = args.load or (0.5 if args.quick else 1.5)
    rows = []
    with common.postgres_server(args.database_url) as server_url, Procs(args.keep_logs) as procs:
        common.banner(f"model affinity: {jobs} jobs, {args.workers} gpu workers (CPU fallback), 4 models, "
                      f"{args.load}s loads, {args.job}s jobs", args, server_url)
        url = common.qw_database(server_url)
        try:
            for name, weights in MIXES.items():
                used = sum(1 for w in weights if w > 0)
                big = name == "m3 too big"
                bound = (jobs * args.job + used * args.load) / args.workers
                if big:  # m3's share runs on the one worker that can hold it
                    bound = max(bound, args.load + jobs * weights[3] * args.job)
                best = best_schedule(weights, jobs=jobs, workers=args.workers, job_seconds=args.job, load=args.load, seed=7, big=big)
                got = {r: run_mix(url, procs, weights, jobs=jobs, workers=args.workers, job_seconds=args.job, load=args.load,
                                  routing=r, seed=7, timeout=args.timeout, big=big) for r in ("affinity", "fifo")}
                for routing, label in (("affinity", "this engine"), ("fifo", "plain FIFO")):
                    res = got[routing]
                    if res is None:
                        rows.append([name, label, "-", "-", "-", "-", f"timeout ({args.timeout:.0f}s)"])
                        continue
                    span, loads, m3_on = res
                    rows.append([name, label, f"{span:.2f}", str(loads), common.ratio(span, bound), common.ratio(span, best),
                                 f"m3 ran on {m3_on} worker(s)" if big else ""])
                rows.append([name, "lower bound", f"{bound:.2f}", str(used), "1.00x", "-", "one load per model"])
                rows.append([name, "best schedule", f"{best:.2f}", "-", common.ratio(best, bound), "1.00x", "zero overhead"])
                eng, fifo = got["affinity"], got["fifo"]
                if eng and fifo:
                    print(f"   {name}: engine {eng[0]:.2f}s ({eng[1]} loads), FIFO {fifo[0]:.1f}s ({fifo[1]} loads): "
                          f"{fifo[0] / eng[0]:.1f}x better than FIFO, {eng[0] / bound:.2f}x the lower bound, "
                          f"{eng[0] / best:.2f}x the best schedule", flush=True)
        finally:
            procs.stop(procs.started)
            from queue_workflows import db

            db.close_pools()
            common.drop_database(server_url, url)
    common.print_table(["mix", "routing", "makespan s", "model loads", "vs lower bound", "vs best schedule", "note"], rows)
    print("   Lower bound: all the work plus one load of each model, spread evenly over the workers; with one model")
    print("   slot per worker and more models than workers no schedule reaches it. Best schedule: the least makespan")
    print("   any schedule of this backlog could have with zero overhead per job (schedule_bound.py: every")
    print("   model-to-worker assignment, jobs split freely), which is what routing alone could achieve.")
    print(f"   'm3 too big': m3 needs {BIG_VRAM_GB:.0f} GB and only one worker has it free, so only that worker")
    print("   loads it (FIFO ignores VRAM too, as a plain queue would). A model no worker can fit never runs:")
    print("   the leader flags its jobs unassignable (tests/gpu/test_gpu_models.py).")
    return 0


if __name__ == "__main__":
    sys.exit(main())
