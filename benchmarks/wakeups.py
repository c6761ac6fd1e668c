"""Wake-up fan-out: how many idle workers an enqueue wakes, and how many claims it costs.

80 idle listener connections over 10 queues, simulated in one process (each connection LISTENs
and, when woken for its queue, runs the real one-job claim, as a worker would). W of them serve
queue q0, the other 80 - W are spread over q1..q9. J jobs are enqueued on q0, one per
transaction, each waited for until claimed. Two schemes, same run:

- table channel (before migration 0020): every worker of the table LISTENs on
  `ingest_job_ready` and checks the payload, so every enqueue wakes all 80 processes;
- queue channel: workers LISTEN on `qw_ready_<queue>`; only q0's W wake, and all of them claim;
- queue channel + idle baton (now, `queue_workflows.worker.idle_baton`): of q0's idle workers only the
  holder of the queue's baton (the real advisory lock, on its connection) acts on a NOTIFY; when
  it claims it hands the lock to the next in line (a FIFO here, Postgres's lock queue in a real
  worker), which wakes for the lock and claims once to catch up. The rest stay asleep.

Reported per job: processes woken, futile claims (woken, claimed nothing), and enqueue -> claim
p50 on the database clock.

    python benchmarks/wakeups.py [--jobs 200] [--workers 1,10,50]
"""

from __future__ import annotations

import select
import sys
from dataclasses import dataclass, field

import common
import psycopg
from psycopg import sql
from psycopg.rows import dict_row

QUEUES = [f"q{i}" for i in range(10)]
TOTAL = 80  # idle listeners in all: the embedded server allows 100 connections


@dataclass
class Listener:
    conn: psycopg.Connection
    queue: str
    worker_id: str
    woken: int = 0
    claims: list[bool] = field(default_factory=list)


def listeners(url: str, scheme: str, on_q0: int) -> list[Listener]:
    others = [QUEUES[1 + i % 9] for i in range(TOTAL - on_q0)]
    made = []
    for n, queue in enumerate(["q0"] * on_q0 + others):
        conn = psycopg.connect(url, autocommit=True, row_factory=dict_row)
        channel = "ingest_job_ready" if scheme == "table channel" else f"qw_ready_{queue}"
        conn.execute(sql.SQL("LISTEN {}").format(sql.Identifier(channel)))
        made.append(Listener(conn, queue, f"sim:{queue}:{n}"))
    return made


def run(url: str, scheme: str, on_q0: int, jobs: int) -> tuple[float, float, float]:
    from queue_workflows import jobstore, node_queue
    from queue_workflows.worker.idle_baton import BATON_NAMESPACE

    pool = listeners(url, scheme, on_q0)
    baton = ("SELECT pg_try_advisory_lock(%s, hashtext('q0')) AS ok", "SELECT pg_advisory_unlock(%s, hashtext('q0'))")
    line = [ls for ls in pool if ls.queue == "q0"] if scheme.endswith("baton") else []
    if line:
        assert line[0].conn.execute(baton[0], (BATON_NAMESPACE,)).fetchone()["ok"]
    # Without a baton every idle worker listens, so every enqueue must be announced (migration 0051).
    common.scalar(url, "DELETE FROM qw_wake_every_enqueue WHERE queue = 'q0' RETURNING queue")
    if not line:
        common.scalar(url, "INSERT INTO qw_wake_every_enqueue (queue) VALUES ('q0') RETURNING queue")

    def claim(ls: Listener) -> int | None:
        row = ls.conn.execute(*node_queue.claim_statement("ingest_jobs", ls.queue, jobstore.Claimant(ls.worker_id, 0))).fetchone()
        ls.claims.append(row is not None)
        return row["id"] if row is not None else None

    def pass_baton(holder: Listener) -> None:
        """The holder claimed: it hands the lock on and goes to the back; the next one catches up."""
        holder.conn.execute(baton[1], (BATON_NAMESPACE,))
        line.append(line.pop(0))
        nxt = line[0]
        assert nxt.conn.execute(baton[0], (BATON_NAMESPACE,)).fetchone()["ok"]
        nxt.woken += 1
        list(nxt.conn.notifies(timeout=0))  # what came while it waited in line
        claimed = claim(nxt)
        if claimed is not None:
            claimed_ids.append(claimed)
            pass_baton(nxt)

    def wake(ls: Listener) -> int | None:
        """Read `ls`'s notifications; if one is for its queue, claim as a worker would. The id claimed, if any."""
        notes = list(ls.conn.notifies(timeout=0))
        if not notes or (line and ls in line and ls is not line[0]):
            return None  # nothing, or asleep in line on the baton's lock
        ls.woken += 1
        if not any(n.payload == ls.queue for n in notes):
            return None  # woken for another queue: a process woke for nothing
        claimed = claim(ls)
        if claimed is not None and line:
            claimed_ids.append(claimed)
            pass_baton(ls)
            return -1
        return claimed

    by_fd = {ls.conn.fileno(): ls for ls in pool}
    claimed_ids: list[int] = []
    try:
        with psycopg.connect(url, autocommit=True) as writer:
            for _ in range(jobs):
                job_id = node_queue.enqueue_ingest_job("noop", "q0", reason="bench", conn=writer)["id"]
                taken = False
                while not taken:
                    ready, _, _ = select.select(list(by_fd), [], [], 2.0)
                    if not ready:
                        raise RuntimeError(f"job {job_id}: nobody woke within 2 s")
                    for fd in ready:
                        claimed = wake(by_fd[fd])
                        if claimed is not None:
                            taken = True
                            if claimed > 0:
                                claimed_ids.append(claimed)
                # Every wake-up this job caused, and the claim each woken q0 worker would try.
                for ls in pool:
                    ls.conn.execute("SELECT 1")  # delivers whatever the backend holds for it
                    wake(ls)
        lat = common.scalar(url, "SELECT percentile_cont(0.5) WITHIN GROUP (ORDER BY extract(epoch FROM started_at - created_at)) "
                                 "FROM ingest_jobs WHERE id = ANY(%s)", (claimed_ids,))
    finally:
        for ls in pool:
            ls.conn.close()
    woken = sum(ls.woken for ls in pool) / jobs
    futile = sum(not c for ls in pool for c in ls.claims) / jobs
    return woken, futile, float(lat) * 1000


def main(argv: list[str] | None = None) -> int:
    parser = common.base_parser(__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=None, help="jobs per cell (default 200; 50 with --quick)")
    parser.add_argument("--workers", default="1,10,50", help="listeners on the measured queue")
    args = parser.parse_args(argv)
    jobs = args.jobs or (50 if args.quick else 200)
    counts = [int(x) for x in args.workers.split(",")]
    rows = []
    with common.postgres_server(args.database_url) as server_url:
        common.banner(f"wake-up fan-out: {TOTAL} idle listeners over {len(QUEUES)} queues, {jobs} jobs on q0", args, server_url)
        url = common.qw_database(server_url)
        import queue_workflows
        from queue_workflows import register_ingest_task

        queue_workflows.configure(database_url=url, ingest_queues=frozenset(QUEUES))
        register_ingest_task("noop", lambda reason: {})
        try:
            for on_q0 in counts:
                for scheme in ("table channel", "queue channel", "queue channel + idle baton"):
                    with psycopg.connect(url, autocommit=True) as conn:
                        conn.execute("TRUNCATE ingest_jobs RESTART IDENTITY")
                    woken, futile, p50 = run(url, scheme, on_q0, jobs)
                    rows.append([on_q0, scheme, f"{woken:.1f}", f"{futile:.1f}", f"{p50:.2f}"])
                    print(f"   {on_q0:>2} on q0, {scheme:>26}: {woken:.1f} woken/job, {futile:.1f} futile claims/job, p50 {p50:.2f} ms", flush=True)
        finally:
            from queue_workflows import db

            db.close_pools()
            common.drop_database(server_url, url)
    common.print_table(["workers on q0", "scheme", "processes woken / job", "futile claims / job", "enqueue->claim p50 ms"], rows)
    return 0


if __name__ == "__main__":
    sys.exit(main())
