"""The packing benchmark's gpu side (QW_APP=bench_gpu_pack): five models that take a while to load, and a job that holds its VRAM through a fake NVML.

The job allocates its size on each device its claim reserved, through the fake NVML on the
worker's PYTHONPATH (tests/support/fake_nvml), which raises CUDA's out-of-memory error when the
device has less free; it holds it for its simulated seconds, then gives it back. A job with no
reservation (QW_GPU_ROUTING=fifo admits by nothing) takes the devices with the most free, as a
program choosing its own GPU would.
"""

from __future__ import annotations

import os
import time
from typing import Any

from queue_workflows import model_registry
from queue_workflows.gpu.devices import current_devices

GIB = 1 << 30
MODELS = {"a3": 3.0, "b8": 8.0, "c8": 8.0, "d12": 12.0, "e20": 20.0}  # what each model's job holds on a device, GB
LOAD_SECONDS = float(os.environ.get("BENCH_LOAD_SECONDS", "1.0"))
# "0": the models declare no estimate, so every job's need is unknown and it runs alone on its
# device(s) (docs/gpu.md, "Unknown need"): the one-job-per-GPU baseline.
DECLARE = os.environ.get("BENCH_DECLARE_VRAM", "1") == "1"


def _load(model_id: str) -> Any:
    time.sleep(LOAD_SECONDS)  # a stand-in for reading weights onto the device
    return {"model": model_id}


def register_models() -> None:
    for m, gb in MODELS.items():
        model_registry.register(model_registry.ModelSpec(m, lambda m=m: _load(m), est_vram_gb=gb if DECLARE else None))


def _emptiest(path: str, count: int) -> list[int]:
    import pynvml  # the fake

    free = []
    for i in range(pynvml.nvmlDeviceGetCount()):
        free.append((pynvml.nvmlDeviceGetMemoryInfo(i).free, -i))
    return [-i for _, i in sorted(free, reverse=True)[:count]]


def run(inputs: dict[str, Any]) -> dict[str, Any]:
    import pynvml  # the fake

    path, pid = os.environ["QW_FAKE_NVML"], os.getpid()
    devices: list[int | str] = list(current_devices()) or list(_emptiest(path, int(inputs.get("gpus", 1))))
    try:
        for device in devices:
            pynvml.allocate(path, pid, int(float(inputs["gb"]) * GIB), device)
        time.sleep(float(inputs["seconds"]))
    finally:
        pynvml.release(path, pid)
    return {"devices": [str(d) for d in devices]}


model_registry.set_builtin_model_registrar(register_models)
