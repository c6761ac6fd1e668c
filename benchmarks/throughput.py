"""No-op job throughput: queue_workflows (one-job and batch mode) vs pgqueuer vs procrastinate, 1/2/4 processes.

For each system and worker count: start the worker processes and wait until they are ready,
commit N no-op jobs in one transaction, and time from that commit until no job is left
unfinished (polled every 20 ms). Every system gets its own database on the same Postgres.
The ceiling is measured first in the same run: one connection committing a one-row UPDATE in
a loop, the most transactions per second one process gets from this server. Right before each
one-job row, its SQL floor at the same process count: as many processes sending only the
one-job worker's own statements (its completion and the next claim per commit, no worker
around them; onejob_floor.py), timed the same way. The run fails (exit 1) when the one-job
worker drains less than `--min-share` of its floor at any process count.

    python benchmarks/throughput.py [--jobs 20000] [--workers 1,2,4] [--quick] [--database-url DSN] [--min-share 0.75]
"""

from __future__ import annotations

import time
from dataclasses import dataclass

import common
import systems
from common import Procs
from onejob_floor import OneJobFloor

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


def main(argv: list[str] | None = None) -> int:
    parser = common.base_parser(__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=None, help="jobs per run (default 20000; 2000 with --quick)")
    parser.add_argument("--workers", default=None, help="worker counts, comma separated (default 1,2,4; 1,2 with --quick)")
    parser.add_argument("--systems", default=",".join(c.name for c in systems.ALL))
    parser.add_argument("--timeout", type=float, default=None, help="per-run limit in seconds (default 120; 15 with --quick)")
    parser.add_argument("--min-share", type=float, default=None,
                        help="fail unless the one-job worker drains this share of its SQL floor at every process count "
                             "(default 0.75; 0.5 with --quick, whose short drains are noisy)")
    args = parser.parse_args(argv)
    min_share = args.min_share if args.min_share is not None else (0.5 if args.quick else 0.75)
    jobs = args.jobs or (2000 if args.quick else 20000)
    counts = [int(x) for x in (args.workers or ("1,2" if args.quick else "1,2,4")).split(",")]
    timeout = args.timeout or (15.0 if args.quick else 120.0)
    classes = systems.select(args.systems)

    results: list[Result] = []
    with common.postgres_server(args.database_url) as server_url, Procs(args.keep_logs) as procs:
        common.banner(f"throughput: {jobs} no-op jobs committed at once; worker processes {counts}", args, server_url)
        ceiling = commit_ceiling(server_url)
        print(f"   commit ceiling: {ceiling:,.0f} tx/s (one connection, one-row UPDATE per commit)")
        for cls in classes:
            system = cls(server_url)
            floor: OneJobFloor | None = None
            try:
                system.setup()
            except Exception as exc:  # noqa: BLE001
                print(f"   {cls.name}: cannot set up ({type(exc).__name__}: {exc}); skipped")
                system.teardown()
                continue
            print(f"   {cls.name}: {system.describe()}")
            try:
                if cls is systems.QueueWorkflows:
                    floor = OneJobFloor(server_url, system.url)
                    print(f"   {floor.name} (measured right before each {cls.name} row): {floor.describe()}")
                for n in counts:
                    # The floor right before its row, so both share whatever else loads the machine then.
                    for measured in ([floor, system] if floor is not None else [system]):
                        r = measure(measured, procs, n, jobs, timeout)
                        results.append(r)
                        shown = f"{r.rate:,.0f} jobs/s in {r.seconds:.2f}s" if r.rate else r.note
                        enq = f"  (enqueue of {jobs} took {r.enqueue_seconds:.2f}s)" if r.enqueue_seconds else ""
                        print(f"      {n} {'floor process' if measured is floor else 'worker'}(s): {shown}{enq}", flush=True)
            finally:
                system.teardown()

    pgq = {r.workers: r.rate for r in results if r.system == systems.PgQueuer.name}
    floors = {r.workers: r.rate for r in results if r.system == OneJobFloor.name}
    rows = []
    for r in results:
        per_worker = f"{r.rate / r.workers / ceiling:.0%}" if r.rate else "-"
        of_floor = common.ratio(r.rate, floors.get(r.workers)) if r.system == systems.QueueWorkflows.name else "-"
        rows.append([r.system, r.workers, f"{r.rate:,.0f}" if r.rate else "-", f"{r.seconds:.2f}" if r.seconds else "-",
                     common.ratio(r.rate, pgq.get(r.workers)), of_floor, per_worker, r.note])
    print()
    common.print_table(["system", "workers", "jobs/s", "seconds", "vs pgqueuer", "vs one-job SQL floor", "per worker / commit ceiling", "note"], rows)
    print(f"   vs pgqueuer > 1: faster than pgqueuer with as many processes; vs one-job SQL floor: the one-job worker's share of "
          f"its own statements sent by as many bare processes, measured right before it; commit ceiling {ceiling:,.0f} tx/s.")
    return check_floor_shares(results, min_share)


def check_floor_shares(results: list[Result], min_share: float) -> int:
    """Exit status: 1 when the one-job worker drained less than `min_share` of its floor at some process count."""
    floors = {r.workers: r for r in results if r.system == OneJobFloor.name}
    failed = []
    for r in results:
        floor = floors.get(r.workers)
        if r.system != systems.QueueWorkflows.name or floor is None:
            continue
        if not floor.rate:
            print(f"   one-job worker vs its SQL floor at {r.workers} process(es): not compared, the floor did not finish ({floor.note})")
        elif not r.rate:
            failed.append(f"{r.workers} process(es): the floor finished, the workers did not ({r.note})")
        elif r.rate / floor.rate < min_share:
            failed.append(f"{r.workers} process(es): {r.rate:,.0f} jobs/s is {r.rate / floor.rate:.0%} of the floor's "
                          f"{floor.rate:,.0f}, below {min_share:.0%}")
    for line in failed:
        print(f"   FAIL one-job worker vs its SQL floor: {line}")
    if floors and not failed:
        print(f"   ok: the one-job worker drains at least {min_share:.0%} of its SQL floor at every process count")
    return 1 if failed else 0


if __name__ == "__main__":
    raise SystemExit(main())
