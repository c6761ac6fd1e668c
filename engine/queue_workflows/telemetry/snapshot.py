"""The hw-metrics snapshot as JSON (version 1, docs/metrics.md), and its trimmed form for NOTIFY.

Postgres refuses a NOTIFY payload of 8000 bytes or more. The host_metrics row always holds
the full snapshot; the notification drops detail until it fits, least useful first: the
per-container list (smallest consumers first), then the GPUs' names and uuids, then whole
GPUs from the highest index down. `truncated` in the notification says what went.
"""

from __future__ import annotations

import json
from dataclasses import asdict
from typing import Any

from queue_workflows.telemetry.attribution import StackUsage
from queue_workflows.telemetry.gpu_sample import GpuSample
from queue_workflows.telemetry.host import HostFigures

PAYLOAD_VERSION = 1
NOTIFY_LIMIT_BYTES = 7900  # under Postgres's 8000, leaving room for the channel name
CHANNEL = "hw_metrics"  # the channel sql/telemetry.sql's host_metrics_notify publishes on
MAX_TEXT = 128


def build(*, host_label: str, sampled_at: float, host: HostFigures, gpus: list[GpuSample], stack: StackUsage | None) -> dict[str, Any]:
    return {
        "v": PAYLOAD_VERSION,
        "host": host_label,
        "ts": round(sampled_at, 3),
        "cpu": {"percent": _r(host.cpu_percent), "count": host.cpu_count, "load": [_r(x) for x in host.load]},
        "memory": {"used_bytes": host.memory_used_bytes, "total_bytes": host.memory_total_bytes},
        "swap": {"used_bytes": host.swap_used_bytes, "total_bytes": host.swap_total_bytes},
        "gpus": [_gpu(g) for g in gpus],
        "stack": None if stack is None else _stack(stack),
    }


def _r(value: float | None) -> float | None:
    return None if value is None else round(value, 2)


def _text(value: str | None) -> str | None:
    return None if value is None else value[:MAX_TEXT]


def _gpu(sample: GpuSample) -> dict[str, Any]:
    fields = asdict(sample)
    fields.update(name=_text(sample.name), uuid=_text(sample.uuid), source=_text(sample.source))
    if sample.parent is None:
        del fields["parent"]  # only a MIG instance names its GPU: a whole GPU's entry keeps version 1's keys
    else:
        fields["parent"] = _text(sample.parent)
    for key in ("util_percent", "temperature_c", "power_w"):
        fields[key] = _r(fields[key])
    return fields


def _stack(stack: StackUsage) -> dict[str, Any]:
    containers = sorted(stack.containers, key=lambda c: (c.cpu_percent or 0.0, c.memory_bytes or 0), reverse=True)
    return {
        "cgroup_version": stack.cgroup_version,
        "cpu_percent": _r(stack.cpu_percent),
        "memory_bytes": stack.memory_bytes,
        "other_cpu_percent": _r(stack.other_cpu_percent),
        "other_memory_bytes": stack.other_memory_bytes,
        "containers": [
            {"id": c.id[:12], "name": _text(c.name), "cpu_percent": _r(c.cpu_percent), "memory_bytes": c.memory_bytes}
            for c in containers
        ],
    }


def encode(payload: dict[str, Any]) -> str:
    return json.dumps(payload, separators=(",", ":"), allow_nan=False)


def for_notify(payload: dict[str, Any], *, limit: int = NOTIFY_LIMIT_BYTES) -> str:
    """`payload` as compact JSON under `limit` bytes, detail dropped as the module says; never over the limit."""
    text = encode(payload)
    if len(text.encode()) < limit:
        return text
    trimmed = json.loads(text)
    dropped: dict[str, int] = {}
    trimmed["truncated"] = dropped

    def fits() -> bool:
        return len(encode(trimmed).encode()) < limit

    containers = (trimmed.get("stack") or {}).get("containers") or []
    while containers and not fits():
        containers.pop()  # sorted biggest consumers first
        dropped["containers"] = dropped.get("containers", 0) + 1
    gpus = trimmed["gpus"]
    if not fits() and gpus:
        for gpu in gpus:
            gpu["name"] = gpu["uuid"] = None
        dropped["gpu_names"] = len(gpus)
    while gpus and not fits():
        gpus.pop()
        dropped["gpus"] = dropped.get("gpus", 0) + 1
    if not fits():  # only a pathological host label is left: say so rather than exceed the limit
        return encode({"v": PAYLOAD_VERSION, "host": payload["host"][:MAX_TEXT], "ts": payload["ts"], "truncated": {"all": 1}})
    return encode(trimmed)
