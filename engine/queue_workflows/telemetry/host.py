"""The host's own figures (CPU, load, RAM, swap) from psutil, which reads the host's /proc even inside a container."""

from __future__ import annotations

import os
from dataclasses import dataclass

import psutil


@dataclass(frozen=True)
class HostFigures:
    cpu_percent: float  # of all cores, since the previous reading
    cpu_count: int
    load: tuple[float, float, float]  # 1, 5 and 15 minute load averages
    memory_used_bytes: int  # total - available: what programs hold, page cache excluded
    memory_total_bytes: int
    swap_used_bytes: int
    swap_total_bytes: int


class HostReader:
    """CPU percent is a rate: each read covers the time since the previous one; the first measures 0.2 s."""

    def __init__(self) -> None:
        self._first = True

    @staticmethod
    def cpu_count() -> int:
        return psutil.cpu_count() or 1

    def read(self) -> HostFigures:
        memory = psutil.virtual_memory()
        swap = psutil.swap_memory()
        try:
            load = os.getloadavg()
        except OSError:  # not every platform has one
            load = (0.0, 0.0, 0.0)
        return HostFigures(
            cpu_percent=self._cpu_percent(),
            cpu_count=self.cpu_count(),
            load=(float(load[0]), float(load[1]), float(load[2])),
            memory_used_bytes=int(memory.total - memory.available),
            memory_total_bytes=int(memory.total),
            swap_used_bytes=int(swap.used),
            swap_total_bytes=int(swap.total),
        )

    def _cpu_percent(self) -> float:
        first, self._first = self._first, False
        return float(psutil.cpu_percent(interval=0.2 if first else None))
