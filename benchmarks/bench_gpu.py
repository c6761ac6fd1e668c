"""The gpu side of the benchmarks (QW_APP=bench_gpu): four models that take a while to load, and a short node."""

from __future__ import annotations

import os
import time
from typing import Any

from queue_workflows import model_registry

MODELS = ("m0", "m1", "m2", "m3")
LOAD_SECONDS = float(os.environ.get("BENCH_LOAD_SECONDS", "1.5"))
BIG_VRAM_GB = float(os.environ.get("BENCH_BIG_VRAM_GB", "8"))  # m3's estimate: the "too big for one worker" mix raises it


def _load(model_id: str) -> Any:
    time.sleep(LOAD_SECONDS)  # a stand-in for reading weights onto the device
    return {"model": model_id}


def register_models() -> None:
    for m in MODELS:
        est = BIG_VRAM_GB if m == "m3" else 8.0
        model_registry.register(model_registry.ModelSpec(m, lambda m=m: _load(m), est_vram_gb=est))


def run(inputs: dict[str, Any]) -> dict[str, Any]:
    time.sleep(float(inputs.get("sleep", 0.05)))
    return {}


model_registry.set_builtin_model_registrar(register_models)
