"""The GPUs on this host and what they are doing: `probe_gpus()` never raises and never hangs past its timeouts.

Sources in order: NVML (`nvidia-ml-py`), `nvidia-smi`, `amdsmi`, `amd-smi`, `rocm-smi --json`.
Each tool runs with `timeout` seconds; a source that fails, hangs or prints garbage is
absent, so the worst case is a few timeouts and an empty list, not a stuck caller.
"""

from __future__ import annotations

from queue_workflows.telemetry.gpu_sample import GpuSample
from queue_workflows.telemetry.gpus import probe

__all__ = ["GpuSample", "probe_gpus"]


def probe_gpus(*, timeout: float = 2.0) -> list[GpuSample]:
    """One sample per visible GPU, or per MIG instance of a GPU in MIG mode (NVIDIA first, then AMD, each partition its own); [] when there is none or no source answers."""
    return probe(timeout=timeout)
