"""Per-job resource accounting: what one job cost its process, recorded with its outcome.

A worker runs one job at a time, so the process's CPU time across the job is the job's. RSS is
the process's peak so far (`ru_maxrss`); VRAM is what NVML reports this process holding when the
job ends (None where NVML or its per-process query is not available).
"""

from __future__ import annotations

import importlib
import os
import resource
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from queue_workflows.common import sqlfile
from queue_workflows.jobstore import Statement
from queue_workflows.queries import JobTable

_WORKER = sqlfile.load("queue_workflows.worker", "worker.sql")


@dataclass(frozen=True)
class Usage:
    cpu_seconds: float
    peak_rss_bytes: int
    wall_seconds: float
    peak_vram_bytes: int | None = None
    model_load_seconds: float | None = None
    model_hit: bool | None = None

    def statement(self, table: JobTable, job_id: int, worker_id: str) -> Statement:
        """Stamp the running job's row (before its terminal mark, in the same transaction)."""
        params: dict[str, Any] = {"job_id": job_id, "worker_id": worker_id, **self.__dict__}
        return _WORKER.sql("record_usage", table), params


def _cpu() -> float:
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


class ProcessVram:
    """VRAM this process holds on any NVIDIA GPU, per NVML; None when that cannot be asked.

    NVML is initialised once per process, on the first ask, and kept: `nvmlInit` costs
    milliseconds with a driver loaded, which per job would be more than a short job itself.
    A process where it fails (no library, no driver) never tries again.
    """

    def __init__(self, import_nvml: Callable[[], Any] = lambda: importlib.import_module("pynvml")) -> None:
        self._import_nvml = import_nvml
        self._nvml: Any = None
        self._tried = False
        self._lock = threading.Lock()

    def _library(self) -> Any:
        with self._lock:
            if not self._tried:
                self._tried = True
                try:
                    nvml = self._import_nvml()
                    nvml.nvmlInit()
                    self._nvml = nvml
                except Exception:  # noqa: BLE001 - no library, no driver: unknown for good
                    self._nvml = None
            return self._nvml

    def __call__(self) -> int | None:
        nvml = self._library()
        if nvml is None:
            return None
        try:
            total, pid = 0, os.getpid()
            for index in range(nvml.nvmlDeviceGetCount()):
                handle = nvml.nvmlDeviceGetHandleByIndex(index)
                for proc in nvml.nvmlDeviceGetComputeRunningProcesses(handle):
                    if proc.pid == pid and proc.usedGpuMemory:
                        total += int(proc.usedGpuMemory)
            return total
        except Exception:  # noqa: BLE001 - a device gone mid-query: unknown this time
            return None


process_vram_bytes = ProcessVram()


class UsageMeter:
    def __init__(self, *, vram: bool = False, vram_probe: Callable[[], int | None] = process_vram_bytes) -> None:
        self.vram = vram
        self.vram_probe = vram_probe
        self._cpu0 = 0.0
        self._t0 = 0.0

    def start(self) -> None:
        self._cpu0, self._t0 = _cpu(), time.monotonic()

    def finish(self, *, load_seconds: float | None = None, hit: bool | None = None) -> Usage:
        return Usage(
            cpu_seconds=round(_cpu() - self._cpu0, 6),
            peak_rss_bytes=resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024,
            wall_seconds=round(time.monotonic() - self._t0, 6),
            peak_vram_bytes=self.vram_probe() if self.vram else None,
            model_load_seconds=load_seconds,
            model_hit=hit,
        )
