"""Worker ON/OFF: `queue-worker-control --off` (hard) -> the in-flight job running on a peer, and
`--on` -> the parked worker claiming again.

Two workers (host labels box-a and box-b) pass one long job back and forth. Each trial turns
the job's worker OFF with the real console script, restarts it (as its supervisor would; it
comes back parked), enqueues a short job that waits because the peer is busy, and turns it
ON. Both times run on the database clock: from the `worker_controls` row's `updated_at` to the
next `started_at` of the job concerned. Baseline in the same run: a plain enqueue -> start on
an idle worker, the floor for any "a worker reacts" path.

    python benchmarks/worker_control.py [--trials 10] [--quick]
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from datetime import datetime
from typing import Any

import common
import psycopg
from common import Procs, median, percentile
from psycopg.rows import dict_row

from queue_workflows import testing


class Cluster:
    def __init__(self, url: str, procs: Procs) -> None:
        self.url = url
        self.procs = procs
        self.conn = psycopg.connect(url, autocommit=True, row_factory=dict_row)
        self.workers: dict[str, subprocess.Popen[bytes]] = {}

    def q(self, query: str, *params: Any) -> dict[str, Any] | None:
        return self.conn.execute(query, params).fetchone()  # type: ignore[arg-type]

    def start(self, host: str) -> None:
        proc = self.procs.spawn(f"worker-{host}", [sys.executable, "-m", "qw_services.worker", "--queue=fetch"], common.qw_env(self.url, QW_HOST_LABEL=host))
        self.workers[host] = proc
        testing.wait_until(lambda: self.procs.check_alive([proc]) or self.q("SELECT 1 FROM worker_heartbeats WHERE pid = %s", proc.pid), timeout=30, what=f"{host} ready")

    def control(self, host: str, switch: str) -> datetime:
        out = subprocess.run(
            [sys.executable, "-m", "queue_workflows.control.commands", "--queue", "fetch", switch, "--host", host, "--json"],
            env=common.qw_env(self.url), capture_output=True, text=True, timeout=60, check=True,
        )
        return datetime.fromisoformat(json.loads(out.stdout)["updated_at"])

    def started_after(self, job_id: int, after: datetime, host: str) -> datetime:
        row = testing.wait_until(
            lambda: self.q("SELECT started_at FROM ingest_jobs WHERE id = %s AND started_at > %s AND claimed_by LIKE %s", job_id, after, f"{host}:%"),
            timeout=30, interval=0.005, what=f"job {job_id} started on {host}",
        )
        return row["started_at"]  # type: ignore[index]

    def holder(self, job_id: int) -> str:
        row = testing.wait_until(lambda: self.q("SELECT claimed_by FROM ingest_jobs WHERE id = %s AND status = 'running'", job_id), timeout=30)
        return str(row["claimed_by"]).split(":")[0]  # type: ignore[index]


def main(argv: list[str] | None = None) -> int:
    parser = common.base_parser(__doc__.splitlines()[0])
    parser.add_argument("--trials", type=int, default=None, help="OFF/ON trials (default 10; 3 with --quick)")
    args = parser.parse_args(argv)
    trials = args.trials or (3 if args.quick else 10)
    off_times: list[float] = []
    on_times: list[float] = []
    baseline: list[float] = []
    with common.postgres_server(args.database_url) as server_url, Procs(args.keep_logs) as procs:
        common.banner(f"worker control: OFF (hard) and ON, {trials} trials", args, server_url)
        url = common.qw_database(server_url)
        from queue_workflows import node_queue

        cluster = Cluster(url, procs)
        try:
            cluster.start("box-a")
            for _ in range(5):
                job = node_queue.enqueue_ingest_job("noop", "fetch")
                row = testing.wait_until(lambda: cluster.q("SELECT started_at - created_at AS d FROM ingest_jobs WHERE id = %s AND started_at IS NOT NULL", job["id"]), timeout=10)
                baseline.append(row["d"].total_seconds())  # type: ignore[index]
            cluster.start("box-b")
            long_job = int(node_queue.enqueue_ingest_job("sleep", "fetch", {"seconds": 900}, max_attempts=1000)["id"])
            for i in range(trials):
                victim = cluster.holder(long_job)
                peer = "box-b" if victim == "box-a" else "box-a"
                off_at = cluster.control(victim, "--off")
                moved_at = cluster.started_after(long_job, off_at, peer)
                cluster.workers[victim].wait(timeout=30)
                cluster.start(victim)  # its supervisor's restart: it comes back parked
                waiting = int(node_queue.enqueue_ingest_job("sleep", "fetch", {"seconds": 0.2})["id"])
                time.sleep(0.3)  # the waiting job must still be queued: the peer is busy, the victim parked
                assert cluster.q("SELECT status FROM ingest_jobs WHERE id = %s", waiting)["status"] == "queued"  # type: ignore[index]
                on_at = cluster.control(victim, "--on")
                claimed_at = cluster.started_after(waiting, on_at, victim)
                off_times.append((moved_at - off_at).total_seconds())
                on_times.append((claimed_at - on_at).total_seconds())
                print(f"      trial {i + 1:2d}: OFF -> peer {off_times[-1] * 1000:6.1f} ms   ON -> claim {on_times[-1] * 1000:6.1f} ms", flush=True)
                testing.wait_until(lambda: cluster.q("SELECT 1 FROM ingest_jobs WHERE id = %s AND status = 'completed'", waiting), timeout=30)
        finally:
            cluster.conn.close()
            procs.stop(procs.started)
            from queue_workflows import db

            db.close_pools()
            common.drop_database(server_url, url)
    base = median(baseline)
    print()
    common.print_table(
        ["path", "n", "p50 ms", "max ms", "vs enqueue->start"],
        [
            ["enqueue -> start, idle worker (baseline)", len(baseline), f"{base * 1000:.1f}", f"{max(baseline) * 1000:.1f}", "1.00x"],
            ["OFF (hard) -> job running on a peer", len(off_times), f"{median(off_times) * 1000:.1f}", f"{max(off_times) * 1000:.1f}", common.ratio(median(off_times), base)],
            ["ON -> parked worker claiming", len(on_times), f"{median(on_times) * 1000:.1f}", f"{max(on_times) * 1000:.1f}", common.ratio(median(on_times), base)],
        ],
    )
    print(f"   p90: OFF {percentile(off_times, 90) * 1000:.1f} ms, ON {percentile(on_times, 90) * 1000:.1f} ms")
    return 0


if __name__ == "__main__":
    sys.exit(main())
