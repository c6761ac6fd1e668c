"""The ML framework's own peak GPU memory through a job: torch's caching allocator, where the job ran torch on CUDA.

NVML samples the process every interval; torch's allocator knows its own high-water mark
exactly, including a burst between two samples. The figure is `max_memory_reserved`, not
`max_memory_allocated`: the allocator keeps freed blocks reserved for reuse, so reserved (what
tensors used, plus the cache and its fragmentation) is what the process held on the card and no
other job could use, the same memory NVML counts (less the CUDA context); allocated would
understate the need that admission must leave room for.
"""

from __future__ import annotations

import logging
import sys
from typing import Any

log = logging.getLogger(__name__)


def _cuda_torch() -> Any:
    """torch, when the job's code imported it and it has a CUDA context: never imported, nor a context made, here."""
    torch = sys.modules.get("torch")
    try:
        return torch if torch is not None and torch.cuda.is_available() and torch.cuda.is_initialized() else None
    except Exception:  # noqa: BLE001 - a torch without CUDA support
        return None


def framework_reset_peak() -> None:
    """At a job's start: torch's peak counts from here (a job's figure is its own, not the worker's so far)."""
    torch = _cuda_torch()
    if torch is None:
        return  # no CUDA context yet: the first use starts its statistics at zero
    try:
        for device in range(torch.cuda.device_count()):
            torch.cuda.reset_peak_memory_stats(device)
    except Exception as exc:  # noqa: BLE001 - best effort
        log.debug("torch.cuda.reset_peak_memory_stats failed: %s", exc)


def framework_peak_bytes() -> int | None:
    """torch's peak reserved memory since the last reset, summed over its devices; None without torch on CUDA."""
    torch = _cuda_torch()
    if torch is None:
        return None
    try:
        return sum(int(torch.cuda.max_memory_reserved(d)) for d in range(torch.cuda.device_count()))
    except Exception as exc:  # noqa: BLE001 - best effort
        log.debug("torch.cuda.max_memory_reserved failed: %s", exc)
        return None
