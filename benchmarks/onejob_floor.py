"""The one-job SQL floor: processes that send only a one-job worker's statements, drained like its workers.

Each floor process loops on the worker's own per-job round trip (the completion, with its
accounting, and the next claim in one commit), built by the engine's own functions, with no
task, liveness beat, heartbeat or watchdog around it. `OneJobFloor` drives N of them through
the same harness as the workers (`throughput.measure`): ready, one commit of N jobs, timed until
none is unfinished. No one-job worker can drain faster than this on the same server.
"""

from __future__ import annotations

import os
import signal
import sys
import time

import common
import systems
from common import Procs

QUEUE = "fetch"
READY = "floor ready"


class OneJobFloor(systems.QueueWorkflows):
    name = "one_job_sql_floor"
    config = "benchmarks/onejob_floor.py (the one-job worker's completion + next claim per commit, no worker around it)"

    def __init__(self, server_url: str, url: str) -> None:
        """On the database of the workers it is the floor of (`url`): same table, reset between runs."""
        super().__init__(server_url)
        self.url = url

    def setup(self) -> None:
        pass

    def teardown(self) -> None:
        pass  # the database is the workers' own

    def spawn_workers(self, procs: Procs, n: int) -> list:
        env = common.qw_env(self.url)
        argv = [sys.executable, "-c", "import sys, onejob_floor; sys.exit(onejob_floor.child(sys.argv[1]))", self.url]
        self._children = [procs.spawn("one-job-floor", argv, env) for _ in range(n)]
        self._procs = procs
        return self._children

    def ready_count(self) -> int:
        return sum(READY in self._procs.tail(p, chars=200) for p in self._children)


def child(url: str) -> int:
    """One floor process: claim, then complete-and-claim in one commit per job, until SIGTERM."""
    import queue_workflows
    from queue_workflows import db, jobstore, node_queue
    from queue_workflows.worker.usage import Usage

    stop = []
    signal.signal(signal.SIGTERM, lambda *_: stop.append(1))
    queue_workflows.configure(database_url=url, ingest_queues=frozenset({QUEUE}))
    worker_id = f"floor:{os.getpid()}"
    usage = Usage(cpu_seconds=0.0, peak_rss_bytes=0, wall_seconds=0.0)
    with db.connect(autocommit=True, url=url) as conn:
        claim = node_queue.claim_statements(node_queue.INGEST_TABLE, QUEUE, jobstore.Claimant(worker_id, os.getpid()))
        print(READY, flush=True)
        while not stop:
            job = db.one_round_trip(conn, claim)[-1].fetchone()
            if job is None:
                time.sleep(0.002)  # nothing yet (or any more): the harness times from its enqueue's commit
                continue
            while job is not None and not stop:  # a completed no-op job's mark, as the worker builds it, then the next claim
                done = usage.completed_statement(node_queue.INGEST_TABLE, job["id"], worker_id, None)
                job = db.one_round_trip(conn, [done, *claim])[-1].fetchone()
    return 0

