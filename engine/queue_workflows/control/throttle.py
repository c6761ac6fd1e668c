"""Memory-pressure throttle: a worker stops claiming while the host is short of memory.

Hysteresis keeps it from flapping: it throttles above the high marks (RAM 90 %, GPU memory
85 %, swap 70 % by default) and resumes only once every reading is below its low mark
(80 %, 75 %, 60 %). Readings come from an injectable probe: by default psutil reads RAM and
swap and, for a gpu worker, NVML or amdsmi reads GPU memory (the fullest device) where either
works; a host may plug its own reader in with `set_memory_probe`.
"""

from __future__ import annotations

import logging
import os
import threading
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any

from queue_workflows.gpu.memory import gpu_memory

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class MemoryReadings:
    ram_percent: float
    swap_percent: float
    gpu_percent: float | None = None  # None: no GPU, or nobody reads it


@dataclass(frozen=True)
class Marks:
    ram_high: float = 90.0
    ram_low: float = 80.0
    gpu_high: float = 85.0
    gpu_low: float = 75.0
    swap_high: float = 70.0
    swap_low: float = 60.0

    @classmethod
    def from_settings(cls, settings: Any) -> Marks:
        return cls(
            ram_high=settings.memory_throttle_percent, ram_low=settings.memory_resume_percent,
            gpu_high=settings.gpu_throttle_percent, gpu_low=settings.gpu_resume_percent,
            swap_high=settings.swap_throttle_percent, swap_low=settings.swap_resume_percent,
        )


def psutil_probe() -> MemoryReadings:
    import psutil

    return MemoryReadings(ram_percent=psutil.virtual_memory().percent, swap_percent=psutil.swap_memory().percent)


def gpu_probe() -> MemoryReadings:
    """RAM and swap, plus GPU memory where NVML or amdsmi answers (None where neither does: no GPU, no library).

    What this process holds is left out: a gpu worker whose own warm model fills its card would
    otherwise throttle itself until the model's idle unload.
    """
    return replace(psutil_probe(), gpu_percent=gpu_memory.device_percent(besides=(os.getpid(),)))


_probe: Callable[[], MemoryReadings] | None = None  # None: the default for the worker's queue


def set_memory_probe(probe: Callable[[], MemoryReadings] | None) -> None:
    """Replace how this process reads memory (None: back to the default); workers read it every few seconds."""
    global _probe
    if probe is not None and not callable(probe):
        raise TypeError(f"set_memory_probe: {probe!r} is not callable")
    _probe = probe


def current_probe(*, gpu: bool = False) -> Callable[[], MemoryReadings]:
    """The host's probe if it set one; else RAM and swap, and GPU memory too for a gpu worker (`gpu`)."""
    if _probe is not None:
        return _probe
    return gpu_probe if gpu else psutil_probe


class Throttle:
    def __init__(self, marks: Marks) -> None:
        self.marks = marks
        self.active = False
        self.reason = ""
        self._lock = threading.Lock()

    def _over(self, r: MemoryReadings) -> list[str]:
        m = self.marks
        over = []
        if r.ram_percent > m.ram_high:
            over.append(f"RAM {r.ram_percent:.0f}% > {m.ram_high:g}%")
        if r.gpu_percent is not None and r.gpu_percent > m.gpu_high:
            over.append(f"GPU memory {r.gpu_percent:.0f}% > {m.gpu_high:g}%")
        if r.swap_percent > m.swap_high:
            over.append(f"swap {r.swap_percent:.0f}% > {m.swap_high:g}%")
        return over

    def _all_low(self, r: MemoryReadings) -> bool:
        m = self.marks
        gpu_low = r.gpu_percent is None or r.gpu_percent < m.gpu_low
        return r.ram_percent < m.ram_low and gpu_low and r.swap_percent < m.swap_low

    def update(self, readings: MemoryReadings) -> bool:
        """Feed one reading; True when the state changed (logged once per transition)."""
        with self._lock:
            if not self.active and (over := self._over(readings)):
                self.active, self.reason = True, ", ".join(over)
                log.warning("memory pressure (%s): not claiming until it eases", self.reason)
                return True
            if self.active and self._all_low(readings):
                self.active, self.reason = False, ""
                log.warning("memory pressure eased (RAM %.0f%%, swap %.0f%%): claiming again", readings.ram_percent, readings.swap_percent)
                return True
            return False
