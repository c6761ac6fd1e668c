"""History: the hot job table with N finished jobs kept in it, against the same jobs moved to history as they finished.

Two databases, one run. In the first, N completed jobs accumulate in `ingest_jobs` (the mover off,
as before migration 0053). In the second, the same N jobs finish in chunks and the leader's mover
(`leader.history.move_once`) plus a vacuum pass (what autovacuum does) follow each chunk, so the
hot table reuses its space: the steady state of QW_HISTORY_AFTER_SECONDS. Then, on each: the hot
table's size with its indexes, `qw status`'s queue counts (a scan of the whole hot table), and a
one-job claim + completion round trip over Q queued jobs, p50. Ratios are second / first.
"""

from __future__ import annotations

import os
import statistics
import sys
import time

import common

import queue_workflows
from queue_workflows import db, jobstore, node_queue
from queue_workflows.leader import history
from queue_workflows.ops import admin
from queue_workflows.worker.usage import Usage

QUEUE = "fetch"
FINISHED = ("INSERT INTO ingest_jobs (task_name, queue, status, claimed_by, started_at, finished_at, result) "
            "SELECT 'noop', 'fetch', 'completed', 'bench:1', now() - interval '2 hours', now() - interval '1 hour', '{\"ok\": true}' "
            "FROM generate_series(1, %s)")
QUEUED = "INSERT INTO ingest_jobs (task_name, queue) SELECT 'noop', 'fetch' FROM generate_series(1, %s)"


def fill(url: str, finished: int, *, chunk: int | None) -> float:
    """N finished jobs, in one go (`chunk` None) or chunk by chunk with the mover and a vacuum after each; seconds spent moving."""
    moving = 0.0
    with db.connect(autocommit=True, url=url) as conn:
        for start in range(0, finished, chunk or finished):
            conn.execute(FINISHED, (min(chunk or finished, finished - start),))
            if chunk:
                began = time.perf_counter()
                while sum(history.move_once(conn, batch=5000)[0].values()):
                    pass
                moving += time.perf_counter() - began
                conn.execute("VACUUM ingest_jobs")
        conn.execute("VACUUM ANALYZE ingest_jobs")
        conn.execute("CHECKPOINT")  # the moves' WAL is written out before either side is timed
    return moving


def measure(url: str, queued: int) -> dict[str, float]:
    """Hot table bytes (with indexes), queue-count p50 (ms), claim + completion p50 (ms) over `queued` jobs."""
    with db.connect(autocommit=True, url=url) as conn:
        size = float(conn.execute("SELECT pg_total_relation_size('ingest_jobs') AS b").fetchone()["b"])  # type: ignore[index]
        counts = []
        for _ in range(15):
            began = time.perf_counter()
            admin.queue_overview(conn)
            counts.append((time.perf_counter() - began) * 1000)
        conn.execute(QUEUED, (queued,))
        conn.execute("ANALYZE ingest_jobs")
        worker_id = f"bench:{os.getpid()}"
        claim = node_queue.claim_statements(node_queue.INGEST_TABLE, QUEUE, jobstore.Claimant(worker_id, os.getpid()))
        usage = Usage(cpu_seconds=0.0, peak_rss_bytes=0, wall_seconds=0.0)
        rounds = []
        job = db.one_round_trip(conn, claim)[-1].fetchone()
        while job is not None:
            began = time.perf_counter()
            job = db.one_round_trip(conn, [usage.completed_statement(node_queue.INGEST_TABLE, job["id"], worker_id, None), *claim])[-1].fetchone()
            rounds.append((time.perf_counter() - began) * 1000)
    return {"size": size, "counts": statistics.median(counts), "claim": statistics.median(rounds)}


def main(argv: list[str] | None = None) -> int:
    parser = common.base_parser(__doc__.splitlines()[0])
    parser.add_argument("--finished", type=int, default=None, help="finished jobs (default 200,000; 20,000 with --quick)")
    parser.add_argument("--queued", type=int, default=None, help="jobs claimed and completed per side (default 5,000; 1,000 with --quick)")
    parser.add_argument("--reverse", action="store_true", help="measure the moved side first (an order check)")
    args = parser.parse_args(argv)
    finished = args.finished or (20_000 if args.quick else 200_000)
    queued = args.queued or (1_000 if args.quick else 5_000)
    chunk = max(1, finished // 20)
    with common.postgres_server(args.database_url) as server_url:
        common.banner(f"history: {finished:,} finished jobs kept hot vs moved in chunks of {chunk:,}; {queued:,} claims each", args, server_url)
        results = {}
        sides = (("kept hot (mover off)", None), ("moved to history", chunk))
        for side, every in sides[::-1] if args.reverse else sides:
            url = common.qw_database(server_url)
            try:
                queue_workflows.configure(database_url=url, ingest_queues=frozenset({QUEUE}), history_after_seconds=60)
                moving = fill(url, finished, chunk=every)
                results[side] = {**measure(url, queued), "moving": moving}
            finally:
                common.drop_database(server_url, url)
        hot, moved = results["kept hot (mover off)"], results["moved to history"]
        common.print_table(
            ["figure", "kept hot", "moved", "moved / kept"],
            [["hot table + indexes (MiB)", f"{hot['size'] / 2**20:.1f}", f"{moved['size'] / 2**20:.1f}", common.ratio(moved["size"], hot["size"])],
             ["qw status queue counts p50 (ms)", f"{hot['counts']:.2f}", f"{moved['counts']:.2f}", common.ratio(moved["counts"], hot["counts"])],
             ["claim + complete p50 (ms)", f"{hot['claim']:.3f}", f"{moved['claim']:.3f}", common.ratio(moved["claim"], hot["claim"])]])
        print(f"   mover: {finished:,} rows in {moved['moving']:.1f} s ({finished / max(moved['moving'], 1e-9):,.0f} rows/s, batches of 5,000)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
