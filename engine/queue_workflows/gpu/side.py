"""What a gpu worker does beyond a cpu worker: refuse without a GPU, keep models warm, run each
job with its model, and say which models it holds.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

from . import registry
from .cache import Acquired, ModelCache, ModelLoadError, using

log = logging.getLogger(__name__)

Probe = Callable[[], list[Any]]


def _default_probe() -> list[Any]:
    from .probe import probe_gpus

    return probe_gpus()


class GpuSide:
    def __init__(self, settings: Any, *, probe: Probe = _default_probe) -> None:
        self.cache = ModelCache(
            slots=settings.gpu_model_slots,
            budget_gb=settings.gpu_vram_budget_gb,
            idle_seconds=settings.gpu_idle_unload_seconds,
        )
        self.cpu_fallback = bool(settings.gpu_cpu_fallback)
        self.probe = probe
        self.refusal: str | None = None
        self._unknown_warned: set[str] = set()

    def start(self) -> None:
        """Register the built-in models, and decide whether this worker may claim at all."""
        registry.ensure_builtin_models()
        if self.cpu_fallback:
            log.warning("QW_GPU_CPU_FALLBACK is set: gpu jobs run on this worker whether or not it has a GPU")
            return
        if not self.probe():
            self.refusal = ("no GPU is visible to this worker (NVML, nvidia-smi, amdsmi, amd-smi and rocm-smi found none): "
                            "it will not claim gpu jobs. Give the container the device, or set QW_GPU_CPU_FALLBACK=1 "
                            "to run them on the CPU")
            log.error("%s", self.refusal)

    def may_claim(self) -> bool:
        return self.refusal is None

    def acquire(self, job: dict[str, Any]) -> Acquired | None:
        """The loaded model for the job (loading it on a miss); None when the job names no registered model.

        Raises ModelLoadError when the loader fails: the job fails (and retries) like any error.
        """
        model_id = job.get("required_model")
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

    run_with = staticmethod(using)

    def loaded(self) -> list[str]:
        return self.cache.loaded()

    def most_recent(self) -> str | None:
        return self.cache.most_recent()

    def idle(self) -> None:
        self.cache.unload_idle()

    def close(self) -> None:
        self.cache.clear()


__all__ = ["GpuSide", "ModelLoadError"]
