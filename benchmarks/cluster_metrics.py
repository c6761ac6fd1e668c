"""The orchestrator's cluster metrics: what one leader sample costs, and what a scrape costs.

- sample: one `ClusterMetrics.sample()` on the leader (term, queue depth, oldest claimable job,
  workers, finished jobs since the last sample, worker exits), p50/p95, on empty tables and
  behind a backlog of queued jobs split over both job tables; then with `--finished` jobs in the
  window one sample reads (a throughput of finished/10 jobs/s at the 10 s default);
- baseline: the hw-metrics sidecar's queue read (`telemetry.store.read_queue_figures`) behind the
  same backlog, measured in the same run: the sample's cost is given as a ratio of it;
- scrape: rendering the last sample as Prometheus text (no database).

    python benchmarks/cluster_metrics.py [--samples 30] [--backlog 100000] [--finished 10000] [--database-url DSN]
"""

from __future__ import annotations

import time

import common
from common import median, percentile
from prometheus_client import generate_latest

from queue_workflows import db
from queue_workflows.leader.cluster_exposition import registry_for
from queue_workflows.leader.cluster_metrics import ClusterMetrics
from queue_workflows.telemetry import store

BACKLOG_INGEST = "INSERT INTO ingest_jobs (task_name, queue, reason) SELECT 'noop', 'fetch', 'bench' FROM generate_series(1, %s)"
BACKLOG_NODES = "INSERT INTO workflow_node_jobs (node_name, queue) SELECT 'embed', 'cpu' FROM generate_series(1, %s)"
# Finished within the last 8 s, with task names drawn from 50, so the grouped answer is realistic.
FINISHED = """INSERT INTO ingest_jobs (task_name, queue, reason, status, started_at, finished_at, created_at)
SELECT 'task_' || (g %% 50), 'fetch', 'bench', CASE WHEN g %% 10 = 0 THEN 'failed' ELSE 'completed' END,
       now() - make_interval(secs => 1 + (g %% 800) / 100.0), now() - make_interval(secs => (g %% 800) / 100.0),
       now() - make_interval(secs => 1 + (g %% 300) / 10.0)
  FROM generate_series(1, %s) g"""


def sample_times(metrics: ClusterMetrics, conn: db.Conn, samples: int, *, window: float | None = None) -> list[float]:
    times = []
    for _ in range(samples):
        if window is not None:  # every sample reads the same window of finished jobs, as at a steady throughput
            office = metrics._office
            assert office is not None
            office.finished_since = time.time() - window
        started = time.perf_counter()
        metrics.sample(conn)
        times.append(time.perf_counter() - started)
    return times


def baseline_times(conn: db.Conn, samples: int) -> list[float]:
    times = []
    for _ in range(samples):
        started = time.perf_counter()
        store.read_queue_figures(conn, stale_after_seconds=30)
        times.append(time.perf_counter() - started)
    return times


def main() -> None:
    parser = common.base_parser(__doc__.splitlines()[0])
    parser.add_argument("--samples", type=int, default=30)
    parser.add_argument("--backlog", type=int, default=100_000)
    parser.add_argument("--finished", type=int, default=10_000)
    args = parser.parse_args()
    if args.quick:
        args.samples, args.backlog, args.finished = 10, 10_000, 1_000
    with common.postgres_server(args.database_url) as server_url:
        common.banner("orchestrator cluster metrics", args, server_url)
        url = common.qw_database(server_url)
        try:
            with db.connect(autocommit=True, url=url) as conn:
                metrics = ClusterMetrics(interval=10, max_tasks=200, stale_after_seconds=30, url=url, lag_seconds=0)
                metrics.took_office(1)
                metrics.sample(conn)  # the term's first sample sets its watermarks
                empty = sample_times(metrics, conn, args.samples)
                conn.execute(BACKLOG_INGEST, (args.backlog // 2,))
                conn.execute(BACKLOG_NODES, (args.backlog - args.backlog // 2,))
                conn.execute("VACUUM ANALYZE ingest_jobs")
                conn.execute("VACUUM ANALYZE workflow_node_jobs")
                baseline = baseline_times(conn, args.samples)
                behind = sample_times(metrics, conn, args.samples)
                conn.execute(FINISHED, (args.finished,))
                conn.execute("VACUUM ANALYZE ingest_jobs")
                finished = sample_times(metrics, conn, args.samples, window=10.0)
                completed = sum(metrics.latest().completed.values()) + sum(metrics.latest().failed.values())
                assert completed >= args.finished, f"the window read {completed} finished jobs, expected {args.finished} per sample"
                registry = registry_for(metrics)
                scrapes = []
                for _ in range(args.samples):
                    started = time.perf_counter()
                    text = generate_latest(registry)
                    scrapes.append(time.perf_counter() - started)
                series = sum(1 for line in text.decode().splitlines() if line.startswith("qw_cluster_"))
        finally:
            db.close_pools()
            common.drop_database(server_url, url)
    ms = 1000.0
    base = median(baseline)
    common.print_table(
        ["measure", "p50", "p95", "vs sidecar queue read", "note"],
        [
            ["sample, empty tables", f"{median(empty) * ms:.1f} ms", f"{percentile(empty, 95) * ms:.1f} ms", "", "the leader's five reads"],
            [f"sidecar queue read, {args.backlog:,} queued (baseline)", f"{base * ms:.1f} ms", f"{percentile(baseline, 95) * ms:.1f} ms", "1.00x",
             "telemetry.store.read_queue_figures"],
            [f"sample, {args.backlog:,} queued", f"{median(behind) * ms:.1f} ms", f"{percentile(behind, 95) * ms:.1f} ms",
             f"{median(behind) / base:.2f}x", "half ingest, half node jobs"],
            [f"sample, + {args.finished:,} finished in its window", f"{median(finished) * ms:.1f} ms", f"{percentile(finished, 95) * ms:.1f} ms",
             f"{median(finished) / base:.2f}x", f"{args.finished / 10:,.0f} jobs/s at the 10 s default"],
            ["scrape (render, no database)", f"{median(scrapes) * ms:.2f} ms", f"{percentile(scrapes, 95) * ms:.2f} ms", "", f"{series} qw_cluster_ lines"],
        ],
    )


if __name__ == "__main__":
    main()
