"""A gpu worker's devices as its claim sees them (docs/gpu.md, "Several jobs per GPU"): UUID, total and free VRAM in GB."""

from __future__ import annotations

import os
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass
from typing import Any

GIB = float(1 << 30)
# The variables that pin a process to some devices, by vendor (the probe's `source` says which).
VISIBILITY = {"nvidia": ("CUDA_VISIBLE_DEVICES",), "amd": ("HIP_VISIBLE_DEVICES", "ROCR_VISIBLE_DEVICES")}
_current: ContextVar[tuple[str, ...]] = ContextVar("qw_current_gpu_devices", default=())


def current_devices() -> tuple[str, ...]:
    """Inside a gpu job: the UUIDs of the devices its claim reserved VRAM on; () without a reservation."""
    return _current.get()


def current_device() -> str | None:
    """The first of them (a one-GPU job's device); None without a reservation."""
    return next(iter(_current.get()), None)


def device_env() -> dict[str, str]:
    """The environment that pins a job's subprocess to its reserved devices (a process's own CUDA
    context cannot be re-pinned once made); {} without a reservation."""
    listed = ",".join(_current.get())
    return {"CUDA_VISIBLE_DEVICES": listed, "HIP_VISIBLE_DEVICES": listed} if listed else {}


@contextmanager
def on_devices(uuids: Sequence[str] | None) -> Iterator[None]:
    token = _current.set(tuple(uuids or ()))
    try:
        yield
    finally:
        _current.reset(token)


@dataclass(frozen=True, slots=True)
class Device:
    uuid: str
    total_gb: float
    free_gb: float | None  # what NVML/amdsmi read as free (foreign processes count); None: not read
    parent: str | None = None  # a MIG instance's GPU (UUID); None for a whole GPU or an AMD partition

    def published(self) -> dict[str, Any]:
        """The heartbeat's entry for it (worker_heartbeats.gpu_devices); a MIG instance's names its GPU."""
        entry = {"uuid": self.uuid, "total_gb": round(self.total_gb, 3), "free_gb": None if self.free_gb is None else round(self.free_gb, 3)}
        return entry if self.parent is None else {**entry, "parent": self.parent}


def _vendor(sample: Any) -> str:
    source = str(getattr(sample, "source", "")).lower()
    return "amd" if any(word in source for word in ("amd", "rocm")) else "nvidia"


def visible(sample: Any, env: Mapping[str, str]) -> bool:
    """Whether this process may use the device: NVML and amdsmi list every device on the host,
    whatever CUDA_VISIBLE_DEVICES / HIP_VISIBLE_DEVICES / ROCR_VISIBLE_DEVICES say; entries are
    indices or UUIDs (a UUID's prefix, as CUDA accepts). A MIG instance is visible where it is
    named, or where its GPU is (by index or UUID): the operator gave the worker that GPU's slices."""
    uuids = [u for u in (getattr(sample, "uuid", None), getattr(sample, "parent", None)) if u]
    for name in VISIBILITY[_vendor(sample)]:
        listed = env.get(name)
        if listed is None:
            continue
        entries = [e.strip() for e in listed.split(",") if e.strip()]
        if not any(e == str(sample.index) or (not e.isdigit() and any(u.startswith(e) for u in uuids)) for e in entries):
            return False
    return True


def from_samples(samples: Sequence[Any], *, free_override: float | None = None, env: Mapping[str, str] | None = None) -> list[Device]:
    """The probed devices a claim may reserve on: those this process may use, with a UUID and a
    total; QW_GPU_FREE_VRAM_GB overrides each one's free."""
    devices = []
    for sample in samples:
        uuid, total = getattr(sample, "uuid", None), getattr(sample, "memory_total_bytes", None)
        if not uuid or total is None or not visible(sample, os.environ if env is None else env):
            continue  # one that cannot be told apart, accounted, or used here: not reserved on
        free = getattr(sample, "memory_free_bytes", None)
        free_gb = free_override if free_override is not None else None if free is None else free / GIB
        devices.append(Device(str(uuid), total / GIB, free_gb, getattr(sample, "parent", None)))
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

