"""Per-job resource accounting: what one job cost its process, recorded with its outcome.

A worker runs one job at a time, so the process's CPU time across the job is the job's. RSS is
the process's peak so far (`ru_maxrss`); VRAM is the highest that the process and its children
held on any GPU while the job ran, sampled through the job (worker/vram_peak.py; None where
neither NVML nor amdsmi can be asked and torch did not run on CUDA).
"""

from __future__ import annotations

import resource
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from queue_workflows.common import sqlfile
from queue_workflows.gpu.memory import GpuMemory, gpu_memory, import_amdsmi, import_nvml
from queue_workflows.jobstore import Statement
from queue_workflows.queries import JobTable
from queue_workflows.worker.vram_peak import PeakSampler, is_own

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

    def completed_statement(self, table: JobTable, job_id: int, worker_id: str, result: Any) -> Statement:
        """The claimant's completion of its running job with this usage stamped in the same row version; no row when no longer ours."""
        params: dict[str, Any] = {"job_id": job_id, "worker_id": worker_id, "result": result, **self.__dict__}
        return _WORKER.sql("complete_job", table), params


def _cpu() -> float:
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


class ProcessVram:
    """VRAM this process and its children hold on any GPU, per NVML (or amdsmi); None when that cannot be asked."""

    def __init__(self, import_nvml: Callable[[], Any] = import_nvml, import_amdsmi: Callable[[], Any] = import_amdsmi,
                 *, memory: GpuMemory | None = None) -> None:
        self.memory = memory if memory is not None else GpuMemory(import_nvml, import_amdsmi)

    @property
    def absent(self) -> bool:
        """Neither NVML nor amdsmi started here: sampling would read nothing."""
        return self.memory.absent

    def __call__(self) -> int | None:
        return self.memory.process_bytes(is_own)

    def on_devices(self, uuids: Sequence[str]) -> Callable[[], int | None]:
        """The same reading over these devices only (a job's reservation: NVML lists a MIG instance's processes on the instance)."""
        return lambda: self.memory.process_bytes(is_own, uuids=uuids)


process_vram_bytes = ProcessVram(memory=gpu_memory)


class UsageMeter:
    def __init__(self, *, vram: bool = False, vram_probe: Callable[[], int | None] = process_vram_bytes,
                 sample_seconds: float = 0.5) -> None:
        self.vram = vram
        self.vram_probe = vram_probe
        self.sampler = PeakSampler(vram_probe, interval=sample_seconds)
        self._cpu0 = 0.0
        self._t0 = 0.0

    def start(self, devices: Sequence[str] | None = None) -> None:
        """Begin a job; `devices`, the UUIDs it reserved on, are the ones its VRAM is read on (None: every one)."""
        self._cpu0, self._t0 = _cpu(), time.monotonic()
        if self.vram:
            scoped = getattr(self.vram_probe, "on_devices", None)
            probe = scoped(devices) if devices and scoped is not None else None
            self.sampler.start(sample=not getattr(self.vram_probe, "absent", False), probe=probe)

    def finish(self, *, load_seconds: float | None = None, hit: bool | None = None) -> Usage:
        r = resource.getrusage(resource.RUSAGE_SELF)
        return Usage(
            cpu_seconds=round(r.ru_utime + r.ru_stime - self._cpu0, 6),
            peak_rss_bytes=r.ru_maxrss * 1024,
            wall_seconds=round(time.monotonic() - self._t0, 6),
            peak_vram_bytes=self.sampler.stop() if self.vram else None,
            model_load_seconds=load_seconds,
            model_hit=hit,
        )
