"""Crash recovery: `kill -9` of a busy queue_workflows worker -> its job running on another worker.

Real processes: `python -m qw_services.orchestrator` (reclaim sweep every 0.25 s; a job is
reclaimed when its worker's lock is missing at two looks a sweep apart) and claim workers on
queue `fetch`, QW_LEASE_SECONDS=30, so a fast recovery can only come from the worker's lock
(Postgres drops it the moment the dead process's two connections close).

Each trial: an idle spare worker is started and ready, then, after a random 0-1 s pause
(so kills do not phase-lock to the sweep), the worker running the long job is
SIGKILLed; recovery = the job's new `started_at` minus `clock_timestamp()` read just before
the kill (both on the database clock), polled every 5 ms. The same job is handed
on from worker to worker (max_attempts is raised so it is never failed).

Baseline in the same run: the lease-expiry path. The busy worker is SIGSTOPped instead (its
connection and lock stay up, as when a host hangs) so only the lapsed lease frees the job.

    python benchmarks/recovery.py [--trials 10] [--quick] [--database-url DSN]
"""

from __future__ import annotations

import os
import random
import signal
import subprocess
import time
from typing import Any

import common
import psycopg
from common import Procs, median
from psycopg.rows import dict_row

from queue_workflows import testing

PEERS = [
    (
        "pgqueuer 1.6.0",
        "a 'picked' job whose heartbeat is older than heartbeat_timeout is re-picked by the next dequeue: "
        "QueueManager.run(heartbeat_timeout=timedelta(seconds=30)) / `pgq run --heartbeat-timeout 30.0`; "
        "beats every timeout/2, and an idle worker dequeues only on a NOTIFY or every dequeue_timeout (30 s)",
        15.0,
    ),
    (
        "procrastinate 3.10.0",
        "no automatic recovery: the app must itself call JobManager.get_stalled_jobs(seconds_since_heartbeat=30) "
        "and retry them (e.g. from a periodic task); workers beat every update_heartbeat_interval=10.0 s",
        20.0,
    ),
]


class Bench:
    def __init__(self, url: str, procs: Procs, env: dict[str, str]) -> None:
        self.url = url
        self.procs = procs
        self.env = env
        self.conn = psycopg.connect(url, autocommit=True, row_factory=dict_row)
        self.workers: dict[int, subprocess.Popen[bytes]] = {}

    def q(self, query: str, *params: Any) -> dict[str, Any] | None:
        return self.conn.execute(query, params or None).fetchone()  # type: ignore[arg-type]

    def spawn_ready(self, n: int = 1) -> None:
        """Start `n` workers and wait until each has written its heartbeat (it LISTENs before that)."""
        new = [self.procs.qw_worker(self.env) for _ in range(n)]
        for p in new:
            self.workers[p.pid] = p

        def ready() -> bool:
            self.procs.check_alive(new)
            row = self.q("SELECT count(*) AS n FROM worker_heartbeats WHERE pid = ANY(%s)", [p.pid for p in new])
            return bool(row and row["n"] == n)

        testing.wait_until(ready, timeout=30, interval=0.05, what=f"{n} worker(s) ready")
        time.sleep(0.2)

    def holder(self, job_id: int, not_by: str | None = None, timeout: float = 60.0) -> dict[str, Any]:
        """Poll (5 ms) until the job is running, on someone other than `not_by`."""

        def running() -> dict[str, Any] | None:
            row = self.q("SELECT status, claimed_by, started_at, attempts FROM ingest_jobs WHERE id = %s", job_id)
            if row and row["status"] == "running" and row["claimed_by"] and row["claimed_by"] != not_by:
                return row
            return None

        return testing.wait_until(running, timeout=timeout, interval=0.005, what=f"job {job_id} running elsewhere")

    def pid_of(self, claimed_by: str) -> int:
        return int(claimed_by.split(":")[-2])  # worker_id = host:queue:pid:token

    def interrupt(self, job_id: int, sig: signal.Signals, timeout: float) -> tuple[float, float, str]:
        """Send `sig` to the job's worker; returns (db seconds, client seconds, new holder)."""
        row = self.holder(job_id)
        pid = self.pid_of(row["claimed_by"])
        # De-phase from the orchestrator's reclaim tick: each trial starts right after the
        # previous tick, so without this the kills land at a fixed offset from the next one.
        time.sleep(random.uniform(0.0, 1.0))
        t_db = self.q("SELECT clock_timestamp() AS t")["t"]  # type: ignore[index]
        t_client = time.perf_counter()
        os.kill(pid, sig)
        new = self.holder(job_id, not_by=row["claimed_by"], timeout=timeout)
        client = time.perf_counter() - t_client
        if sig is signal.SIGSTOP:
            os.kill(pid, signal.SIGKILL)
        self.workers.pop(pid, None)
        return (new["started_at"] - t_db).total_seconds(), client, new["claimed_by"]


def main(argv: list[str] | None = None) -> int:
    parser = common.base_parser(__doc__.splitlines()[0])
    parser.add_argument("--trials", type=int, default=None, help="kill -9 trials (default 10; 3 with --quick)")
    parser.add_argument("--lease-seconds", type=float, default=None, help="QW_LEASE_SECONDS (default 30; 5 with --quick)")
    parser.add_argument("--skip-lease-trial", action="store_true", help="do not measure the lease-expiry baseline")
    args = parser.parse_args(argv)
    trials = args.trials or (3 if args.quick else 10)
    lease = args.lease_seconds or (5.0 if args.quick else 30.0)
    renew = min(10.0, lease / 2.5)

    with common.postgres_server(args.database_url) as server_url, Procs(args.keep_logs) as procs:
        common.banner(f"recovery: kill -9 of a busy worker, {trials} trials, lease {lease:g}s", args, server_url)
        url = testing.create_database(server_url, "qwbench_recovery")
        bench: Bench | None = None
        try:
            env = common.qw_env(url, QW_LEASE_SECONDS=str(lease), QW_LEASE_RENEW_SECONDS=str(renew), QW_MAX_ATTEMPTS="1000")
            orch = procs.qw_orchestrator(env)
            testing.wait_until(
                lambda: procs.check_alive([orch]) or common.scalar(url, "SELECT to_regclass('ingest_jobs') IS NOT NULL"),
                timeout=60, what="orchestrator to apply the schema",
            )
            import queue_workflows
            from queue_workflows import node_queue

            queue_workflows.configure(database_url=url, ingest_queues=frozenset({"fetch"}))
            import bench_app  # noqa: F401 - registers `sleep` so enqueue validates it

            bench = Bench(url, procs, env)
            bench.spawn_ready(2)
            job_id = int(node_queue.enqueue_ingest_job("sleep", "fetch", {"seconds": 900}, max_attempts=1000)["id"])
            print(f"   orchestrator + 2 workers up; long job {job_id} enqueued (QW_LEASE_SECONDS={lease:g}, renew every {renew:g}s)")

            lease_db: float | None = None
            if not args.skip_lease_trial:
                lease_db, _, _ = bench.interrupt(job_id, signal.SIGSTOP, timeout=lease * 2 + 10)
                print(f"   lease-expiry path (SIGSTOP, lock still held): recovered after {lease_db:.2f}s")
                bench.spawn_ready(1)

            db_times: list[float] = []
            client_times: list[float] = []
            for i in range(trials):
                db_s, client_s, _ = bench.interrupt(job_id, signal.SIGKILL, timeout=lease * 2 + 10)
                db_times.append(db_s)
                client_times.append(client_s)
                print(f"      trial {i + 1:2d}: {db_s * 1000:7.1f} ms (db clock)  {client_s * 1000:7.1f} ms (5 ms poll)", flush=True)
                if i + 1 < trials:
                    bench.spawn_ready(1)
        finally:
            if bench is not None:
                bench.conn.close()
            procs.stop(procs.started)
            from queue_workflows import db

            db.close_pools()
            common.drop_database(server_url, url)

    med = median(db_times)
    print()
    rows = [
        ["queue_workflows: kill -9 (worker lock)", len(db_times), f"{med:.3f}", f"{min(db_times):.3f}", f"{max(db_times):.3f}", "1.00x", "measured"],
        ["queue_workflows: client-side poll", len(client_times), f"{median(client_times):.3f}", f"{min(client_times):.3f}", f"{max(client_times):.3f}", "-", "measured"],
    ]
    if lease_db is not None:
        rows.append(["queue_workflows: lease expiry (SIGSTOP)", 1, f"{lease_db:.3f}", "-", "-", common.ratio(lease_db, med), "measured"])
    rows.append([f"seed: lease-only recovery (lease {lease:g}s)", "-", f"<= {lease:g}", "-", "-", f"{lease / med:.0f}x (worst)", "configured bound"])
    for name, _, floor in PEERS:
        rows.append([f"{name} default", "-", f">= ~{floor:g}", "-", "-", f">= {floor / med:.0f}x", "stated from source, not measured"])
    common.print_table(["path", "n", "median s", "min s", "max s", "vs kill -9", "how"], rows)
    for name, how, _ in PEERS:
        print(f"   {name}: {how}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
