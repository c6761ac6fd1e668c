"""No-op job throughput: queue_workflows (one-job and batch mode) vs pgqueuer vs procrastinate, 1/2/4 processes.

For each system and worker count: start the worker processes and wait until they are ready,
commit N no-op jobs in one transaction, and time from that commit until no job is left
unfinished (polled every 20 ms). Every system gets its own database on the same Postgres.
The ceiling is measured first in the same run: one connection committing a one-row UPDATE in
a loop, the most transactions per second one process gets from this server. Beside it, the
one-job worker's own statements alone (a completion and the next claim per commit, no worker
process): the most any one-job worker could drain on this server.

    python benchmarks/throughput.py [--jobs 20000] [--workers 1,2,4] [--quick] [--database-url DSN]
"""

from __future__ import annotations

import time
from dataclasses import dataclass

import common
import systems
from common import Procs

from queue_workflows import testing


@dataclass
class Result:
    system: str
    workers: int
    jobs: int
    seconds: float | None = None
    enqueue_seconds: float | None = None
    note: str = ""

    @property
    def rate(self) -> float | None:
        return self.jobs / self.seconds if self.seconds else None


def measure(system: systems.System, procs: Procs, workers: int, jobs: int, timeout: float) -> Result:
    result = Result(system.name, workers, jobs)
    started: list = []
    try:
        system.reset()
        started = systems.start_workers(system, procs, workers)
        t_enqueue = time.perf_counter()
        system.enqueue_many(jobs)
        t0 = time.perf_counter()
        result.enqueue_seconds = t0 - t_enqueue
        deadline = t0 + timeout
        while (left := system.unfinished()) > 0:
            if time.perf_counter() > deadline:
                result.note = f"timeout: {jobs - left}/{jobs} done in {timeout:.0f}s"
                return result
            time.sleep(0.02)
        result.seconds = time.perf_counter() - t0
        done = system.succeeded()
        if done != jobs:
            result.note = f"only {done}/{jobs} succeeded"
    except Exception as exc:  # noqa: BLE001 - report it and carry on with the next run
        lines = [ln for ln in str(exc).strip().splitlines() if ln.strip()]
        result.note = f"failed: {(lines[-1] if lines else type(exc).__name__)[:160]}"
    finally:
        procs.stop(started)
    return result


def commit_ceiling(server_url: str, seconds: float = 2.0) -> float:
    """Transactions per second of a bare one-row UPDATE commit loop, on one connection."""
    import psycopg

    url = testing.create_database(server_url, "qwbench_ceiling")
    try:
        with psycopg.connect(url, autocommit=True) as conn:
            conn.execute("CREATE TABLE ceiling (id int PRIMARY KEY, n bigint)")
            conn.execute("INSERT INTO ceiling VALUES (1, 0)")
            started, n = time.perf_counter(), 0
            while time.perf_counter() - started < seconds:
                conn.execute("UPDATE ceiling SET n = n + 1 WHERE id = 1")
                n += 1
            return n / (time.perf_counter() - started)
    finally:
        common.drop_database(server_url, url)


def one_job_sql_floor(server_url: str, seconds: float = 2.0) -> float:
    """Jobs per second of the one-job worker's own statements alone, on one connection: each
    job's completion and the next claim in one pipelined commit, as the worker sends them, with
    no worker process, task or liveness around them. No one-job worker can beat this."""
    from queue_workflows import bulk, db, jobstore, node_queue

    url = common.qw_database(server_url)
    try:
        with db.connect(autocommit=True, url=url) as conn:
            with conn.transaction():
                bulk.copy_ingest_jobs(({"task_name": "noop", "queue": "fetch", "reason": "bench"} for _ in range(40_000)), conn=conn)
            claimant = jobstore.Claimant("floor", 1)
            claim = node_queue.claim_statements(node_queue.INGEST_TABLE, "fetch", claimant)
            job = db.one_round_trip(conn, claim)[-1].fetchone()
            started, n = time.perf_counter(), 0
            while job is not None and time.perf_counter() - started < seconds:
                mark = jobstore.mark_statement(node_queue.INGEST_TABLE, "completed", job["id"], result=None, worker_id="floor")
                job = db.one_round_trip(conn, [mark, *claim])[-1].fetchone()
                n += 1
            return n / (time.perf_counter() - started)
    finally:
        db.close_pools()
        common.drop_database(server_url, url)


def main(argv: list[str] | None = None) -> int:
    parser = common.base_parser(__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=None, help="jobs per run (default 20000; 2000 with --quick)")
    parser.add_argument("--workers", default=None, help="worker counts, comma separated (default 1,2,4; 1,2 with --quick)")
    parser.add_argument("--systems", default=",".join(c.name for c in systems.ALL))
    parser.add_argument("--timeout", type=float, default=None, help="per-run limit in seconds (default 120; 15 with --quick)")
    args = parser.parse_args(argv)
    jobs = args.jobs or (2000 if args.quick else 20000)
    counts = [int(x) for x in (args.workers or ("1,2" if args.quick else "1,2,4")).split(",")]
    timeout = args.timeout or (15.0 if args.quick else 120.0)
    classes = systems.select(args.systems)

    results: list[Result] = []
    with common.postgres_server(args.database_url) as server_url, Procs(args.keep_logs) as procs:
        common.banner(f"throughput: {jobs} no-op jobs committed at once; worker processes {counts}", args, server_url)
        ceiling = commit_ceiling(server_url)
        print(f"   commit ceiling: {ceiling:,.0f} tx/s (one connection, one-row UPDATE per commit)")
        floor = one_job_sql_floor(server_url)
        print(f"   one-job SQL alone: {floor:,.0f} jobs/s ({floor / ceiling:.0%} of the ceiling): a completion and the next "
              "claim per commit, no worker; the most a one-job worker could reach")
        for cls in classes:
            system = cls(server_url)
            try:
                system.setup()
            except Exception as exc:  # noqa: BLE001
                print(f"   {cls.name}: cannot set up ({type(exc).__name__}: {exc}); skipped")
                system.teardown()
                continue
            print(f"   {cls.name}: {system.describe()}")
            try:
                for n in counts:
                    r = measure(system, procs, n, jobs, timeout)
                    results.append(r)
                    shown = f"{r.rate:,.0f} jobs/s in {r.seconds:.2f}s" if r.rate else r.note
                    enq = f"  (enqueue of {jobs} took {r.enqueue_seconds:.2f}s)" if r.enqueue_seconds else ""
                    print(f"      {n} worker(s): {shown}{enq}", flush=True)
            finally:
                system.teardown()

    pgq = {r.workers: r.rate for r in results if r.system == systems.PgQueuer.name}
    rows = []
    for r in results:
        per_worker = f"{r.rate / r.workers / ceiling:.0%}" if r.rate else "-"
        rows.append([r.system, r.workers, f"{r.rate:,.0f}" if r.rate else "-", f"{r.seconds:.2f}" if r.seconds else "-",
                     common.ratio(r.rate, pgq.get(r.workers)), per_worker, r.note])
    print()
    common.print_table(["system", "workers", "jobs/s", "seconds", "vs pgqueuer", "per worker / commit ceiling", "note"], rows)
    print(f"   vs pgqueuer > 1: faster than pgqueuer with as many processes; commit ceiling {ceiling:,.0f} tx/s; "
          f"one-job SQL alone {floor:,.0f} jobs/s ({floor / ceiling:.0%}).")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
