"""Prometheus exposition of the sidecar's latest figures, with `prometheus_client`; names in docs/metrics.md.

A scrape never touches the database: it renders what the sampling loop last stored. While
the database is unreachable the queue, worker and model gauges are left out (not served
stale) and `qw_hw_metrics_database_up` says 0; host figures and counters carry on.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from prometheus_client import ProcessCollector
from prometheus_client.core import Metric
from prometheus_client.registry import Collector, CollectorRegistry

from queue_workflows.common.promfamily import counter, gauge
from queue_workflows.jobrow import JobStatus
from queue_workflows.telemetry.state import MetricsState
from queue_workflows.telemetry.store import QueueFigures

DEPTH_STATUSES = tuple(s.value for s in (JobStatus.QUEUED, JobStatus.RUNNING, JobStatus.SCHEDULED))
# What finished jobs cost (queue_workflows.worker.usage), summed since this sidecar started.
COST_METRICS = {
    "cpu_seconds": "CPU seconds the finished jobs' processes spent on them",
    "wall_seconds": "Wall-clock seconds of the finished jobs",
    "model_loads": "Finished gpu jobs that had to load their model (a cold start)",
    "model_load_seconds": "Seconds finished gpu jobs spent loading their model",
}


class SidecarCollector(Collector):
    def __init__(self, state: MetricsState) -> None:
        self.state = state

    def collect(self) -> Iterator[Metric]:
        s = self.state
        with s.lock:
            payload, queues, outcomes, costs = s.payload, s.queues, dict(s.outcomes), dict(s.costs)
            up, failures = s.database_up, s.publish_failures
            known_queues, known_workers = set(s.known_queues), set(s.known_workers)
        host = s.host_label
        yield gauge("qw_hw_metrics_database_up", "1 when the last publish and queue read reached the database", ["host"], [([host], float(up))])
        yield counter("qw_hw_metrics_publish_failures", "Samples that could not be published to the database", ["host"], [([host], failures)])
        if payload is not None:
            yield from host_metrics(payload)
        if up and queues is not None:
            yield from queue_metrics(queues, known_queues, known_workers)
        yield counter(
            "qw_jobs_finished", "Jobs that reached a final state since this sidecar started, by outcome",
            ["family", "queue", "outcome"], [(list(k), n) for k, n in sorted(outcomes.items())],
        )
        for cost, doc in COST_METRICS.items():
            yield counter(f"qw_job_{cost}", doc, ["family", "queue"],
                           [([family, queue], v) for (family, queue, c), v in sorted(costs.items()) if c == cost])




def host_metrics(p: dict[str, Any]) -> Iterator[Metric]:
    h = [p["host"]]
    cpu, mem, swap = p["cpu"], p["memory"], p["swap"]
    yield gauge("qw_hw_metrics_last_sample_timestamp_seconds", "Unix time of the latest sample", ["host"], [(h, p["ts"])])
    yield gauge("qw_host_cpu_percent", "Host CPU use, percent of all cores", ["host"], [(h, cpu["percent"])])
    yield gauge("qw_host_cpu_count", "Logical CPUs on the host", ["host"], [(h, cpu["count"])])
    yield gauge("qw_host_load_average", "Host load average", ["host", "window"],
                 [([p["host"], w], v) for w, v in zip(("1m", "5m", "15m"), cpu["load"], strict=False)])
    yield gauge("qw_host_memory_used_bytes", "Host RAM in use (total - available)", ["host"], [(h, mem["used_bytes"])])
    yield gauge("qw_host_memory_total_bytes", "Host RAM", ["host"], [(h, mem["total_bytes"])])
    yield gauge("qw_host_swap_used_bytes", "Host swap in use", ["host"], [(h, swap["used_bytes"])])
    yield gauge("qw_host_swap_total_bytes", "Host swap", ["host"], [(h, swap["total_bytes"])])
    gpus = p["gpus"]

    def label(g: dict[str, Any]) -> str:
        """The GPU's index; a MIG instance shares its parent's, so its UUID follows."""
        return f'{g["index"]}/{g["uuid"]}' if g.get("parent") else str(g["index"])

    def per_gpu(key: str) -> list[tuple[list[str], float | None]]:
        return [([p["host"], label(g)], g[key]) for g in gpus]

    yield gauge("qw_gpu_info", "One per GPU, its name, uuid and the source that read it", ["host", "gpu", "name", "uuid", "source"],
                 [([p["host"], label(g), g["name"] or "", g["uuid"] or "", g["source"] or ""], 1.0) for g in gpus])
    yield gauge("qw_gpu_utilization_percent", "GPU busy percent", ["host", "gpu"], per_gpu("util_percent"))
    yield gauge("qw_gpu_memory_used_bytes", "GPU memory in use", ["host", "gpu"], per_gpu("memory_used_bytes"))
    yield gauge("qw_gpu_memory_total_bytes", "GPU memory", ["host", "gpu"], per_gpu("memory_total_bytes"))
    yield gauge("qw_gpu_temperature_celsius", "GPU temperature", ["host", "gpu"], per_gpu("temperature_c"))
    yield gauge("qw_gpu_power_watts", "GPU power draw", ["host", "gpu"], per_gpu("power_w"))
    stack = p["stack"]
    if stack is not None:
        yield gauge("qw_attribution_cpu_percent", "Host CPU percent used by this stack's containers and by everything else",
                     ["host", "scope"], [(h + ["stack"], stack["cpu_percent"]), (h + ["other"], stack["other_cpu_percent"])])
        yield gauge("qw_attribution_memory_bytes", "Host RAM held by this stack's containers and by everything else",
                     ["host", "scope"], [(h + ["stack"], stack["memory_bytes"]), (h + ["other"], stack["other_memory_bytes"])])
        containers = stack["containers"]
        yield gauge("qw_container_cpu_percent", "A stack container's CPU, percent of the host", ["host", "container"],
                     [([p["host"], c["name"]], c["cpu_percent"]) for c in containers])
        yield gauge("qw_container_memory_bytes", "A stack container's memory (cgroup)", ["host", "container"],
                     [([p["host"], c["name"]], c["memory_bytes"]) for c in containers])


def queue_metrics(f: QueueFigures, known_queues: set[tuple[str, str]], known_workers: set[tuple[str, str]]) -> Iterator[Metric]:
    queues = sorted(known_queues)
    yield gauge("qw_queue_jobs", "Jobs per queue in a live state", ["family", "queue", "status"],
                 [([fam, q, st], float(f.jobs.get((fam, q, st), 0))) for fam, q in queues for st in DEPTH_STATUSES])
    yield gauge("qw_queue_oldest_queued_seconds", "Age of the oldest queued job (0: none queued)", ["family", "queue"],
                 [([fam, q], f.oldest_queued_s.get((fam, q), 0.0)) for fam, q in queues])
    yield gauge("qw_workers_live", "Live workers (connected, heartbeat fresh) per host and queue", ["host", "queue"],
                 [([h, q], float(f.live_workers.get((h, q), 0))) for h, q in sorted(known_workers)])
    yield gauge("qw_warm_model_workers", "Live workers holding a model loaded, per host, queue and model", ["host", "queue", "model"],
                 [(list(k), float(n)) for k, n in sorted(f.warm_models.items())])


def registry_for(state: MetricsState) -> CollectorRegistry:
    """The sidecar's figures plus its own process' (`process_*`: CPU seconds, resident memory, open fds)."""
    registry = CollectorRegistry(auto_describe=False)
    registry.register(SidecarCollector(state))
    ProcessCollector(registry=registry)
    return registry
