"""Orchestrator failover: `kill -9` (or SIGSTOP) of the leader -> the new leader dispatching.

Real processes: two `python -m qw_services.orchestrator`, one leading, one standing by. Each
trial starts a two-node DAG run (`a` -> `b`), kills the leader with SIGKILL after a random
0-0.5 s pause, and completes `a` by plain SQL right after the kill (its outbox event is then
waiting for a leader). Failover = `b`'s `created_at` (the new leader's drain enqueued it)
minus `clock_timestamp()` read just before the kill, both on the database clock. A fresh
standby is started and ready before the next trial, so there are always two. With `--freeze`
the leader is SIGSTOPped instead (its lease, QW_LEADER_LEASE_SECONDS, must lapse first) and
SIGCONTed after the trial, when it stands by again.

Baseline in the same run: the same completion with a live leader (event -> `b` enqueued), the
price of dispatch itself.

    python benchmarks/failover.py [--trials 5] [--freeze] [--quick] [--database-url DSN]
"""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import time
from typing import Any

import common
from common import Procs, median, percentile

from queue_workflows import testing

TWO_STEPS = {"name": "failover", "nodes": [{"id": "a", "call": "bench_app:dag_step"}, {"id": "b", "call": "bench_app:dag_step", "deps": ["a"]}]}
B_ENQUEUED = """
SELECT extract(epoch FROM b.created_at - %s::timestamptz)::float
  FROM workflow_node_jobs b WHERE b.run_id = %s AND b.node_name = 'b'
"""


def leader(url: str) -> int | None:
    return common.scalar(url, "SELECT o.pid FROM qw_orchestrators o JOIN qw_leadership l ON o.epoch = l.epoch WHERE o.role = 'leader'")


def standby_ready(url: str, pid: int) -> bool:
    return bool(common.scalar(url, "SELECT count(*) FROM qw_orchestrators WHERE pid = %s AND role = 'standby'", (pid,)))


def complete_a(url: str, run_id: int) -> None:
    common.scalar(url, "UPDATE workflow_node_jobs SET status = 'completed', finished_at = now() "
                       "WHERE run_id = %s AND node_name = 'a' RETURNING id", (run_id,))


def wait_b(url: str, run_id: int, since: Any) -> float:
    return testing.wait_until(lambda: common.scalar(url, B_ENQUEUED, (since, run_id)), timeout=30, interval=0.002, what="b enqueued")


def trial(url: str, kill: subprocess.Popen[bytes] | None, *, freeze: bool = False) -> float:
    from queue_workflows import start_run

    run_id = start_run(TWO_STEPS, {})
    if kill is not None:
        time.sleep(random.uniform(0, 0.5))  # do not phase-lock the kill to the standby's poll
    since = common.scalar(url, "SELECT clock_timestamp()")
    if kill is not None and freeze:
        os.kill(kill.pid, signal.SIGSTOP)
        try:
            complete_a(url, run_id)
            return wait_b(url, run_id, since)
        finally:
            os.kill(kill.pid, signal.SIGCONT)
    if kill is not None:
        os.kill(kill.pid, signal.SIGKILL)
        kill.wait()
    complete_a(url, run_id)
    return wait_b(url, run_id, since)


def main(argv: list[str] | None = None) -> int:
    parser = common.base_parser(__doc__.splitlines()[0])
    parser.add_argument("--trials", type=int, default=None, help="failovers timed (default 5; 2 with --quick)")
    parser.add_argument("--freeze", action="store_true", help="SIGSTOP the leader instead of kill -9 (SIGCONT after)")
    args = parser.parse_args(argv)
    args.trials = args.trials or (2 if args.quick else 5)
    with common.postgres_server(args.database_url) as server_url, Procs(args.keep_logs) as procs:
        how = "SIGSTOP" if args.freeze else "kill -9"
        common.banner(f"orchestrator failover: {how} of the leader, {args.trials} trials", args, server_url)
        url = common.qw_database(server_url)
        env = common.qw_env(url, QW_LOG_LEVEL="INFO")
        try:
            running = {p.pid: p for p in (procs.qw_orchestrator(env), procs.qw_orchestrator(env))}
            baseline, failover = [], []
            for _ in range(args.trials):
                pid = testing.wait_until(lambda: leader(url), timeout=30, what="a leader")
                testing.wait_until(lambda: any(standby_ready(url, p) for p in running if p != pid), timeout=30, what="a standby")
                baseline.append(trial(url, None))
                if args.freeze:  # resumed, the old leader stands by again
                    failover.append(trial(url, running[pid], freeze=True))
                else:
                    failover.append(trial(url, running.pop(pid)))
                    fresh = procs.qw_orchestrator(env)
                    running[fresh.pid] = fresh
                procs.check_alive(list(running.values()))
        finally:
            procs.stop(procs.started)
            from queue_workflows import db

            db.close_pools()
            common.drop_database(server_url, url)
    ms = lambda xs, f: f"{f(xs) * 1000:.0f}"  # noqa: E731
    common.print_table(
        ["completion -> dependant enqueued", "trials", "p50 ms", "max ms"],
        [
            ["live leader (baseline)", len(baseline), ms(baseline, median), ms(baseline, max)],
            [f"leader {how} just before", len(failover), ms(failover, median), ms(failover, max)],
        ],
    )
    target = "the lease + ~0.2 s" if args.freeze else "~2 s"
    print(f"   failover p50 {median(failover):.2f}s (target {target}); p90 {percentile(failover, 90):.2f}s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
