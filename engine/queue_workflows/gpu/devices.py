"""A gpu worker's devices as its claim sees them (docs/gpu.md, "Several jobs per GPU"): UUID, total and free VRAM in GB."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

GIB = float(1 << 30)


@dataclass(frozen=True, slots=True)
class Device:
    uuid: str
    total_gb: float
    free_gb: float | None  # what NVML/amdsmi read as free (foreign processes count); None: not read

    def published(self) -> dict[str, Any]:
        """The heartbeat's entry for it (worker_heartbeats.gpu_devices)."""
        return {"uuid": self.uuid, "total_gb": round(self.total_gb, 3), "free_gb": None if self.free_gb is None else round(self.free_gb, 3)}


def from_samples(samples: Sequence[Any], *, free_override: float | None = None) -> list[Device]:
    """The probed devices a claim may reserve on: those with a UUID and a total; QW_GPU_FREE_VRAM_GB overrides each one's free."""
    devices = []
    for sample in samples:
        uuid, total = getattr(sample, "uuid", None), getattr(sample, "memory_total_bytes", None)
        if not uuid or total is None:
            continue  # a device without either cannot be told apart or accounted: not reserved on
        free = getattr(sample, "memory_free_bytes", None)
        devices.append(Device(str(uuid), total / GIB, free_override if free_override is not None else None if free is None else free / GIB))
    return devices


def claim_params(devices: Sequence[Device], *, margin_gb: float, own_idle_gb: float = 0.0) -> dict[str, Any]:
    """The claim's device parameters (gpu/claim.sql, gpu_room). `own_idle_gb`, what this worker's warm
    models hold, counts as free: the worker gives it back (unloading) before a model it must load."""
    return {
        "gpu_uuids": [d.uuid for d in devices],
        "gpu_total_gb": [d.total_gb for d in devices],
        "gpu_free_gb": [None if d.free_gb is None else d.free_gb + own_idle_gb for d in devices],
        "vram_margin_gb": margin_gb,
    }

