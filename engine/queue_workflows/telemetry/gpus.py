"""Ask each GPU source in turn: NVIDIA (NVML, then nvidia-smi), then AMD (amdsmi, amd-smi, rocm-smi).

Within a vendor the first source that answers wins, so a device is never counted twice;
both vendors are asked, so a box with cards of each reports them all. Every source is
bounded by `timeout` and none can raise: a failing one is simply absent.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence

from queue_workflows.telemetry import amd, nvidia
from queue_workflows.telemetry.gpu_sample import GpuSample

log = logging.getLogger(__name__)

Source = Callable[..., "list[GpuSample] | None"]
VENDORS: tuple[tuple[Source, ...], ...] = (
    (nvidia.nvml_samples, nvidia.nvidia_smi_samples),
    (amd.amdsmi_samples, amd.amd_smi_samples, amd.rocm_smi_samples),
)


def probe(*, timeout: float = 2.0, vendors: Sequence[Sequence[Source]] = VENDORS) -> list[GpuSample]:
    samples: list[GpuSample] = []
    for sources in vendors:
        for source in sources:
            try:
                found = source(timeout=timeout)
            except Exception:  # noqa: BLE001 - a parser bug must not take the sampler down
                log.exception("GPU source %s failed: reported absent", getattr(source, "__name__", source))
                found = None
            if found is not None:
                samples.extend(found)
                break
    return samples
