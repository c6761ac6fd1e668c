"""A gpu node and the models a test gpu worker registers at start (QW_APP=qw_gpu_nodes)."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from typing import Any

from queue_workflows import model_registry
from queue_workflows.gpu.devices import current_device, current_devices, device_env


def run(inputs: dict[str, Any]) -> dict[str, Any]:
    """Returns the model the worker loaded for this job (None for a job that names none), after `sleep` s.

    With `oom: "raise" | "exit"` it runs out of GPU memory after holding `hold` bytes (see _out_of_memory).
    With `vram_wave: [high, low]` (bytes) and a fake NVML (tests/support/fake_nvml), the job holds
    `high` until NVML was read twice and ten sample intervals passed (at most 10 s), then drops to `low`.
    With `torch_peak: {"reserved", "allocated"}` (bytes) and a fake torch (tests/support/fake_torch), the job's
    allocator reaches those figures.
    """
    if "hold_gb" in inputs:
        _hold(float(inputs["hold_gb"]), float(inputs.get("seconds", 0)), inputs.get("spans"), inputs.get("until"), float(inputs.get("at_least", 0)))
    time.sleep(float(inputs.get("sleep", 0)))
    if "torch_peak" in inputs:
        import torch  # the fake, on this worker's PYTHONPATH

        torch.reach(os.environ["QW_FAKE_TORCH"], **inputs["torch_peak"])
    if "vram_wave" in inputs:
        _vram_wave(*inputs["vram_wave"])
    if "oom" in inputs:
        _out_of_memory(inputs["oom"], inputs["hold"], inputs["runs_file"])
    if inputs.get("report_devices"):  # tests/gpu/test_gpu_packing.py: what a multi-GPU job sees
        return {"model": model_registry.current(), "devices": list(current_devices()), "env": device_env()}
    return {"model": model_registry.current()}


class OutOfMemoryError(RuntimeError):
    """Stands for torch.cuda.OutOfMemoryError, recognised by its name."""


def _out_of_memory(how: str, hold: int, runs_file: str) -> None:
    """Count the run, hold `hold` bytes until sampled, then run out: raise, or as a child script that prints and exits 1."""
    with open(runs_file, "a") as f:
        f.write("run\n")
    _vram_wave(hold, hold)
    if how == "raise":
        raise OutOfMemoryError("Tried to allocate 30.00 GiB")
    # The pattern is assembled in the child, so only its output (not the command line) says it.
    script = "import sys; sys.stderr.write('RuntimeError: CUDA out of ' + 'memory. Tried to allocate 30.00 GiB\\n'); sys.exit(1)"
    subprocess.run([sys.executable, "-c", script], check=True, capture_output=True)


def _vram_wave(high: int, low: int) -> None:
    import pynvml  # the fake, on this worker's PYTHONPATH

    path = os.environ["QW_FAKE_NVML"]
    pynvml.set_process_memory(path, os.getpid(), high)
    seen = pynvml.queries(path)
    # The worker's other threads read NVML too (the claim's device probe, the throttle), so two reads
    # alone do not prove the job's sampler took one: hold for ten of its intervals as well.
    held_until = time.monotonic() + 10 * float(os.environ.get("QW_GPU_VRAM_SAMPLE_SECONDS", "0.5"))
    deadline = time.monotonic() + 10
    while (pynvml.queries(path) < seen + 2 or time.monotonic() < held_until) and time.monotonic() < deadline:
        time.sleep(0.01)
    pynvml.set_process_memory(path, os.getpid(), low)


def _hold(gb: float, seconds: float, spans: str | None, until: str | None, at_least: float = 0) -> None:
    """Hold `gb` on the device the job reserved on (else the fake's device 0) for `seconds` (or until the file
    `until` exists, but `at_least` seconds: some sampler intervals), appending the span, with the CUDA_VISIBLE_DEVICES a subprocess would get, to the file `spans`."""
    import importlib
    import json

    fake, var = ("amdsmi", "QW_FAKE_AMDSMI") if "QW_FAKE_AMDSMI" in os.environ else ("pynvml", "QW_FAKE_NVML")
    lib = importlib.import_module(fake)  # the fake, on this worker's PYTHONPATH
    path, device = os.environ[var], current_device() or 0
    start = time.time()
    lib.set_process_memory(path, os.getpid(), int(gb * (1 << 30)), device)
    deadline, earliest = time.monotonic() + seconds, time.monotonic() + at_least
    while time.monotonic() < deadline and (time.monotonic() < earliest or not (until and os.path.exists(until))):
        time.sleep(0.02)
    lib.set_process_memory(path, os.getpid(), 0, device)
    if spans:
        with open(spans, "a") as f:
            f.write(json.dumps({"pid": os.getpid(), "gb": gb, "start": start, "end": time.time(), "device": current_device(),
                                "env": device_env()}) + "\n")


def _broken() -> Any:
    raise RuntimeError("weights not found")


def register_models() -> None:
    model_registry.register(model_registry.ModelSpec("warm", lambda: {"model": "warm"}, est_vram_gb=1))
    model_registry.register(model_registry.ModelSpec("broken", _broken, est_vram_gb=1))
    for name, gb in (("a8", 8), ("b8", 8), ("c8", 8), ("a12", 12), ("b12", 12)):  # and tests/gpu/test_gpu_mig.py  # tests/gpu/test_gpu_packing.py
        model_registry.register(model_registry.ModelSpec(name, lambda name=name: {"model": name}, est_vram_gb=gb))


model_registry.set_builtin_model_registrar(register_models)
