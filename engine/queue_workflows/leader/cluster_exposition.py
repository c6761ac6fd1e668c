"""Prometheus exposition of the orchestrator's cluster metrics, with `prometheus_client`; names in docs/metrics.md.

A scrape renders the sampling loop's last `Sample` and never touches the database. A standby
serves only its role, the term and `qw_cluster_database_up` (with `process_*`), so a cluster
figure is never served twice; after a failed sample the leader leaves its gauges out (not
served stale) while its counters carry on.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Iterator

from prometheus_client import ProcessCollector, start_http_server
from prometheus_client.core import HistogramMetricFamily, Metric
from prometheus_client.registry import Collector, CollectorRegistry

from queue_workflows.common.promfamily import counter, gauge
from queue_workflows.errors import ConfigError
from queue_workflows.leader.cluster_metrics import ClusterMetrics, Sample
from queue_workflows.settings import Settings

log = logging.getLogger(__name__)


class ClusterCollector(Collector):
    def __init__(self, metrics: ClusterMetrics) -> None:
        self.metrics = metrics

    def collect(self) -> Iterator[Metric]:
        yield from families(self.metrics.latest())




def _histogram(name: str, doc: str, buckets: dict[str, list[tuple[str, float]]], sums: dict[str, float]) -> HistogramMetricFamily:
    family = HistogramMetricFamily(name, doc, labels=["queue"])
    for queue in sorted(buckets):
        family.add_metric([queue], buckets[queue], sums[queue])
    return family


def families(s: Sample) -> Iterator[Metric]:
    yield gauge("qw_cluster_is_leader", "1 on the leading orchestrator, 0 on a standby", [], [([], float(s.is_leader))])
    yield gauge("qw_cluster_leader_term", "The leadership term (epoch): this leader's, or on a standby the current one", [], [([], float(s.term))])
    yield gauge("qw_cluster_database_up", "1 when the last sample reached the database", [], [([], float(s.database_up))])
    if not s.is_leader:
        return
    if s.fresh:
        yield gauge("qw_cluster_queue_jobs", "Jobs per queue in each live status, both job tables", ["queue", "status"],
                     [([q, st], float(n)) for (q, st), n in sorted(s.queue_jobs.items())])
        yield gauge("qw_cluster_queue_oldest_queued_seconds", "Age of the oldest claimable queued job (0: none)", ["queue"],
                     [([q], age) for q, age in sorted(s.oldest_queued_s.items())])
        yield gauge("qw_cluster_workers", "Worker processes per host, queue and state", ["host", "queue", "state"],
                     [(list(k), float(n)) for k, n in sorted(s.workers.items())])
        yield gauge("qw_cluster_last_sample_timestamp_seconds", "Unix time of the leader's last sample", [], [([], s.sampled_at)])
    yield counter("qw_cluster_jobs_completed", "Jobs completed since this leader took office, by task", ["task"],
                   [([t], float(n)) for t, n in sorted(s.completed.items())])
    yield counter("qw_cluster_jobs_failed", "Jobs failed for good since this leader took office, by task", ["task"],
                   [([t], float(n)) for t, n in sorted(s.failed.items())])
    yield _histogram("qw_cluster_job_wait_seconds", "Enqueue (or run_after) to start, of jobs finished since this leader took office", s.wait, s.wait_sum)
    yield _histogram("qw_cluster_job_run_seconds", "Start to finish, of jobs finished since this leader took office", s.run, s.run_sum)
    yield counter("qw_cluster_job_reclaims", "Running jobs taken back from a dead or expired worker since this leader took office", ["queue"],
                   [([q], float(n)) for q, n in sorted(s.reclaims.items())])
    yield counter("qw_cluster_worker_exits", "Worker exits recorded since this leader took office, by exit code", ["code"],
                   [([str(c)], float(n)) for c, n in sorted(s.exits.items())])


def registry_for(metrics: ClusterMetrics) -> CollectorRegistry:
    """The cluster figures plus this process's own (`process_*`)."""
    registry = CollectorRegistry(auto_describe=False)
    registry.register(ClusterCollector(metrics))
    ProcessCollector(registry=registry)
    return registry


class MetricsEndpoint:
    """The HTTP endpoint and its sampling thread, for one orchestrator process."""

    def __init__(self, metrics: ClusterMetrics, settings: Settings) -> None:
        self.metrics = metrics
        try:
            self.server, _ = start_http_server(settings.orchestrator_metrics_port, settings.orchestrator_metrics_host, registry=registry_for(metrics))
        except OSError as exc:
            raise ConfigError(
                f"QW_ORCHESTRATOR_METRICS_HOST/PORT: cannot listen on {settings.orchestrator_metrics_host}:{settings.orchestrator_metrics_port} "
                f"({exc}); pick a free port, or 0 to serve none"
            ) from None
        self.port = self.server.server_address[1]
        self._stop = threading.Event()
        self.thread = threading.Thread(target=metrics.run, args=(self._stop,), name="qw-cluster-metrics", daemon=True)
        self.thread.start()
        log.info("serving cluster metrics on http://%s:%d/metrics (sampled every %gs)",
                 settings.orchestrator_metrics_host, self.port, metrics.interval)

    def close(self) -> None:
        self._stop.set()
        self.thread.join(timeout=10)
        self.server.shutdown()
        self.server.server_close()
