"""What a gpu worker does beyond a cpu worker: refuse without a GPU, keep models warm, run each
job with its model, and say which models it holds.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Collection
from typing import Any

from psycopg.types.json import Jsonb

from queue_workflows.common import sqlfile
from queue_workflows.gpu import devices, registry
from queue_workflows.gpu.cache import Acquired, ModelCache, ModelLoadError
from queue_workflows.gpu.memory import gpu_memory
from queue_workflows.jobrow import NodeJob

_GPU = sqlfile.load("queue_workflows.gpu", "claim.sql")

log = logging.getLogger(__name__)

Probe = Callable[[], list[Any]]


def _default_probe() -> list[Any]:
    from queue_workflows.gpu.probe import probe_gpus

    return probe_gpus()


class GpuSide:
    def __init__(self, settings: Any, *, probe: Probe = _default_probe) -> None:
        self.cache = ModelCache(
            slots=settings.gpu_model_slots,
            budget_gb=settings.gpu_vram_budget_gb,
            idle_seconds=settings.gpu_idle_unload_seconds,
        )
        self.cpu_fallback = bool(settings.gpu_cpu_fallback)
        self.free_override: float | None = settings.gpu_free_vram_gb
        self.margin_gb = float(settings.gpu_vram_margin_gb)
        self.devices: list[devices.Device] = []  # at the last look; empty: no VRAM admission
        self.probe = probe
        self.refusal: str | None = None
        self._unknown_warned: set[str] = set()
        self._vram: tuple[float | None, float | None] = (None, None)  # (total, free) GB at the last look

    def start(self) -> None:
        """Register the built-in models, and decide whether this worker may claim at all."""
        registry.ensure_builtin_models()
        samples = self.probe()
        self._vram = self._measure(samples)
        self.devices = devices.from_samples(samples, free_override=self.free_override)
        gpu_memory.watch([d.uuid for d in self.devices])  # the throttle reads this worker's devices (a MIG slice's, not its neighbours')
        if self.cpu_fallback:
            log.warning("QW_GPU_CPU_FALLBACK is set: gpu jobs run on this worker whether or not it has a GPU")
            return
        if not samples:
            self.refusal = ("no GPU is visible to this worker (NVML, nvidia-smi, amdsmi, amd-smi and rocm-smi found none): "
                            "it will not claim gpu jobs. Give the container the device, or set QW_GPU_CPU_FALLBACK=1 "
                            "to run them on the CPU")
            log.error("%s", self.refusal)

    def _measure(self, samples: list[Any]) -> tuple[float | None, float | None]:
        """(total, free) VRAM in GB over this worker's GPUs; QW_GPU_FREE_VRAM_GB overrides what is free."""
        totals = [g.memory_total_bytes for g in samples if getattr(g, "memory_total_bytes", None) is not None]
        frees = [g.memory_free_bytes for g in samples if getattr(g, "memory_free_bytes", None) is not None]
        total = sum(totals) / 2**30 if totals else None
        free = sum(frees) / 2**30 if frees else None
        if self.free_override is not None:
            free = self.free_override
            total = total if total is not None else self.free_override
        return total, free

    def vram_available_gb(self) -> float | None:
        """What a new model may use: free VRAM plus what this worker's own models would give back. None: unknown."""
        free = self._vram[1]
        if free is None:
            return None
        return free + self._own_held_gb()

    def free_gb(self, uuids: Collection[str] | None = None) -> float | None:
        """What is free on this worker's GPUs now (re-measured), in GB; None: unknown. With `uuids` (a job's
        reservation), the least free of those devices: an OOM there says nothing of room on another slice or card."""
        samples = self.probe()
        self._vram = self._measure(samples)
        if uuids:
            frees = [d.free_gb for d in devices.from_samples(samples, free_override=self.free_override) if d.uuid in uuids and d.free_gb is not None]
            if frees:
                return min(frees)
        return self._vram[1]

    def heartbeat_fields(self) -> dict[str, Any]:
        """For the heartbeat (the beat thread, every heartbeat): warm models, swapping, VRAM re-measured."""
        samples = self.probe()
        self._vram = self._measure(samples)
        self.devices = devices.from_samples(samples, free_override=self.free_override)
        total, free = self._vram
        return {"loaded_models": self.loaded(), "swapping": self.cache.swapping,
                "vram_total_gb": None if total is None else round(total, 3), "vram_free_gb": None if free is None else round(free, 3),
                "gpu_devices": Jsonb([d.published() for d in self.devices]) if self.devices else None}

    def claim_devices(self) -> dict[str, Any]:
        """The claim's device parameters, re-read now: the free figure is NVML's at this claim, not the last heartbeat's.

        A worker whose probe found no device with a UUID and a total (CPU fallback) names none and
        claims as before, without VRAM admission; it is not probed again per claim.
        """
        if self.devices:
            self.devices = devices.from_samples(self.probe(), free_override=self.free_override) or self.devices
        return devices.claim_params(self.devices, margin_gb=self.margin_gb, own_idle_gb=self._own_held_gb())

    def _own_held_gb(self) -> float:
        return sum(registry.get(model_id).est_vram_gb or 0.0 for model_id in self.cache.loaded())

    def publish_models(self, conn: Any) -> None:
        """Record each registered model's VRAM estimate, for routing and the unassignable check."""
        for spec in registry.registered():
            conn.execute(_GPU.sql("upsert_gpu_model"), {"model_id": spec.id, "est_vram_gb": spec.est_vram_gb})

    def may_claim(self) -> bool:
        return self.refusal is None

    def acquire(self, job: NodeJob) -> Acquired | None:
        """The loaded model for the job (loading it on a miss); None when the job names no registered model.

        Raises ModelLoadError when the loader fails: the job fails (and retries) like any error.
        """
        model_id = job.required_model
        if not model_id:
            return None
        try:
            registry.get(model_id)
        except registry.UnknownModelError as exc:
            if model_id not in self._unknown_warned:
                self._unknown_warned.add(model_id)
                log.warning("%s; its jobs run without a loaded model (model_registry.current() is None)", exc)
            return None
        return self.cache.acquire(model_id)

    def loaded(self) -> list[str]:
        return self.cache.loaded()

    def most_recent(self) -> str | None:
        return self.cache.most_recent()

    def idle(self) -> None:
        self.cache.unload_idle()

    def close(self) -> None:
        self.cache.clear()


__all__ = ["GpuSide", "ModelLoadError"]
