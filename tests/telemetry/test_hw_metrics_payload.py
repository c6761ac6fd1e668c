"""The hw-metrics snapshot: its versioned shape, the NOTIFY trim under 8000 bytes, and its Prometheus rendering."""

from __future__ import annotations

import json

import pytest
from prometheus_client import generate_latest
from prometheus_client.parser import text_string_to_metric_families

from queue_workflows import hw_metrics
from queue_workflows.telemetry import snapshot
from queue_workflows.telemetry.attribution import ContainerUsage, StackUsage
from queue_workflows.telemetry.gpu_sample import GpuSample
from queue_workflows.telemetry.host import HostFigures
from queue_workflows.telemetry.store import QueueFigures, loaded_models

HOST = HostFigures(cpu_percent=42.123, cpu_count=8, load=(1.5, 1.25, 1.0), memory_used_bytes=6 << 30,
                   memory_total_bytes=32 << 30, swap_used_bytes=0, swap_total_bytes=8 << 30)
GPU = GpuSample(0, "NVIDIA RTX A6000", "GPU-aaa", "nvidia-smi", 41.0, 1 << 30, 48 << 30, 63.0, 120.5)


def _stack(n: int, name_len: int = 20) -> StackUsage:
    containers = tuple(ContainerUsage(f"{i:064x}", f"c{i:04d}".ljust(name_len, "x"), float(i), i * 1000) for i in range(n))
    return StackUsage(2, float(sum(range(n))), sum(i * 1000 for i in range(n)), 1.0, 5000, containers)


def test_the_snapshot_shape_is_version_1():
    payload = snapshot.build(host_label="gpu-1", sampled_at=1700000000.5, host=HOST, gpus=[GPU], stack=_stack(2))
    assert payload == {
        "v": 1, "host": "gpu-1", "ts": 1700000000.5,
        "cpu": {"percent": 42.12, "count": 8, "load": [1.5, 1.25, 1.0]},
        "memory": {"used_bytes": 6 << 30, "total_bytes": 32 << 30},
        "swap": {"used_bytes": 0, "total_bytes": 8 << 30},
        "gpus": [{"index": 0, "name": "NVIDIA RTX A6000", "uuid": "GPU-aaa", "source": "nvidia-smi", "util_percent": 41.0,
                  "memory_used_bytes": 1 << 30, "memory_total_bytes": 48 << 30, "temperature_c": 63.0, "power_w": 120.5}],
        "stack": {"cgroup_version": 2, "cpu_percent": 1.0, "memory_bytes": 1000, "other_cpu_percent": 1.0, "other_memory_bytes": 5000,
                  "containers": [{"id": f"{1:064x}"[:12], "name": "c0001".ljust(20, "x"), "cpu_percent": 1.0, "memory_bytes": 1000},
                                 {"id": f"{0:064x}"[:12], "name": "c0000".ljust(20, "x"), "cpu_percent": 0.0, "memory_bytes": 0}]},
    }
    assert json.loads(snapshot.for_notify(payload)) == payload  # small enough: sent whole


def test_an_oversize_snapshot_drops_the_smallest_containers_first_and_says_so():
    payload = snapshot.build(host_label="big", sampled_at=1.0, host=HOST, gpus=[GPU] * 8, stack=_stack(300))
    assert len(snapshot.encode(payload).encode()) > 8000
    sent = snapshot.for_notify(payload)
    assert len(sent.encode()) < 8000
    trimmed = json.loads(sent)
    kept = trimmed["stack"]["containers"]
    assert trimmed["truncated"] == {"containers": 300 - len(kept)}
    assert kept and kept[0]["name"].startswith("c0299") and min(c["cpu_percent"] for c in kept) > 200
    assert len(trimmed["gpus"]) == 8 and trimmed["stack"]["memory_bytes"] == payload["stack"]["memory_bytes"]


def test_past_the_containers_gpu_names_then_gpus_go():
    long_gpu = GpuSample(0, "N" * 500, "U" * 500, "nvml", 1.0, 1, 2, 3.0, 4.0)
    payload = snapshot.build(host_label="h", sampled_at=1.0, host=HOST, gpus=[long_gpu] * 40, stack=None)
    trimmed = json.loads(snapshot.for_notify(payload))
    assert trimmed["truncated"]["gpu_names"] == 40 and all(g["name"] is None for g in trimmed["gpus"])
    assert "gpus" not in trimmed["truncated"] and len(trimmed["gpus"]) == 40
    assert len(snapshot.for_notify(payload, limit=1500).encode()) < 1500
    assert json.loads(snapshot.for_notify(payload, limit=1500))["truncated"]["gpus"] > 0


@pytest.mark.parametrize(("row", "models"), [
    ({"worker_id": "w"}, []),
    ({"loaded_models": ["llama", "sdxl", "llama"]}, ["llama", "sdxl"]),
    ({"loaded_models": [{"id": "a"}, {"model": "b"}, {"x": 1}, 7, ""]}, ["a", "b"]),
    ({"loaded_models": [], "current_model": "whisper"}, ["whisper"]),
    ({"warm_models": {"m1": {"vram": 3}}}, ["m1"]),
    ({"loaded_models": 42}, []),
    (None, []),
])
def test_warm_models_are_read_from_whichever_column_a_heartbeat_has(row, models):
    assert loaded_models(row) == models


def _scrape(state: hw_metrics.MetricsState) -> dict[str, list]:
    text = generate_latest(hw_metrics.registry_for(state)).decode()
    return {f.name: f.samples for f in text_string_to_metric_families(text)}


def test_prometheus_renders_host_gpu_stack_and_queue_figures():
    state = hw_metrics.MetricsState(host_label="gpu-1")
    payload = snapshot.build(host_label="gpu-1", sampled_at=1700000000.0, host=HOST, gpus=[GPU], stack=_stack(2))
    figures = QueueFigures(
        jobs={("ingest", "fetch", "queued"): 3, ("node", "gpu", "running"): 1},
        oldest_queued_s={("ingest", "fetch"): 12.5},
        live_workers={("gpu-1", "gpu"): 2},
        warm_models={("gpu-1", "gpu", "llama"): 1},
    )
    state.update(payload=payload, queues=figures, outcomes={("ingest", "fetch", "completed"): 7}, database_up=True,
                 costs={("node", "gpu", "cpu_seconds"): 12.5, ("node", "gpu", "model_loads"): 3.0})
    metrics = _scrape(state)
    value = {(s.name, tuple(sorted(s.labels.items()))): s.value for samples in metrics.values() for s in samples}
    assert value[("qw_host_cpu_percent", (("host", "gpu-1"),))] == 42.12
    assert value[("qw_gpu_memory_total_bytes", (("gpu", "0"), ("host", "gpu-1")))] == 48 << 30
    assert value[("qw_attribution_memory_bytes", (("host", "gpu-1"), ("scope", "other")))] == 5000
    assert value[("qw_queue_jobs", (("family", "ingest"), ("queue", "fetch"), ("status", "queued")))] == 3
    assert value[("qw_queue_jobs", (("family", "ingest"), ("queue", "fetch"), ("status", "running")))] == 0
    assert value[("qw_queue_oldest_queued_seconds", (("family", "ingest"), ("queue", "fetch")))] == 12.5
    assert value[("qw_workers_live", (("host", "gpu-1"), ("queue", "gpu")))] == 2
    assert value[("qw_warm_model_workers", (("host", "gpu-1"), ("model", "llama"), ("queue", "gpu")))] == 1
    assert value[("qw_jobs_finished_total", (("family", "ingest"), ("outcome", "completed"), ("queue", "fetch")))] == 7
    assert value[("qw_hw_metrics_database_up", (("host", "gpu-1"),))] == 1
    assert value[("qw_job_cpu_seconds_total", (("family", "node"), ("queue", "gpu")))] == 12.5
    assert value[("qw_job_model_loads_total", (("family", "node"), ("queue", "gpu")))] == 3
    assert value[("process_resident_memory_bytes", ())] > 0  # the sidecar's own process, where /proc allows

    state.update(database_up=False, queues=QueueFigures(live_workers={}))  # an outage: queue gauges go, counters stay
    metrics = _scrape(state)
    assert "qw_queue_jobs" not in metrics and "qw_workers_live" not in metrics
    assert [s.value for s in metrics["qw_jobs_finished"]] == [7]
    assert [s.value for s in metrics["qw_hw_metrics_database_up"]] == [0]
    assert [s.value for s in metrics["qw_host_memory_total_bytes"]] == [32 << 30]
