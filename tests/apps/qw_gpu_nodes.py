"""A gpu node and the models a test gpu worker registers at start (QW_APP=qw_gpu_nodes)."""

from __future__ import annotations

import os
import time
from typing import Any

from queue_workflows import model_registry


def run(inputs: dict[str, Any]) -> dict[str, Any]:
    """Returns the model the worker loaded for this job (None for a job that names none), after `sleep` s.

    With `vram_wave: [high, low]` (bytes) and a fake NVML (tests/support/fake_nvml), the job holds
    `high` until the worker has sampled it twice (at most 10 s), then drops to `low` and returns.
    """
    time.sleep(float(inputs.get("sleep", 0)))
    if "vram_wave" in inputs:
        _vram_wave(*inputs["vram_wave"])
    return {"model": model_registry.current()}


def _vram_wave(high: int, low: int) -> None:
    import pynvml  # the fake, on this worker's PYTHONPATH

    path = os.environ["QW_FAKE_NVML"]
    pynvml.set_process_memory(path, os.getpid(), high)
    seen = pynvml.queries(path)
    deadline = time.monotonic() + 10
    while pynvml.queries(path) < seen + 2 and time.monotonic() < deadline:
        time.sleep(0.01)
    pynvml.set_process_memory(path, os.getpid(), low)


def _broken() -> Any:
    raise RuntimeError("weights not found")


def register_models() -> None:
    model_registry.register(model_registry.ModelSpec("warm", lambda: {"model": "warm"}, est_vram_gb=1))
    model_registry.register(model_registry.ModelSpec("broken", _broken, est_vram_gb=1))


model_registry.set_builtin_model_registrar(register_models)
