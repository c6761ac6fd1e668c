"""Per-job VRAM from NVML: initialised once per process, this process's memory summed, and a
library that cannot start is asked once, then left alone."""

from __future__ import annotations

import os
from types import SimpleNamespace

from queue_workflows.worker.usage import ProcessVram, UsageMeter


def no_amdsmi():
    raise ModuleNotFoundError("No module named 'amdsmi'")  # a real amdsmi on the test box must not answer


class FakeNvml:
    def __init__(self, processes_per_device: list[list[tuple[int, int | None]]], fail_init: bool = False) -> None:
        self.devices = processes_per_device
        self.fail_init = fail_init
        self.inits = 0
        self.shutdowns = 0

    def nvmlInit(self) -> None:
        self.inits += 1
        if self.fail_init:
            raise OSError("libnvidia-ml.so.1: cannot open shared object file")

    def nvmlShutdown(self) -> None:
        self.shutdowns += 1

    def nvmlDeviceGetCount(self) -> int:
        return len(self.devices)

    def nvmlDeviceGetHandleByIndex(self, index: int) -> int:
        return index

    def nvmlDeviceGetComputeRunningProcesses(self, handle: int) -> list[SimpleNamespace]:
        return [SimpleNamespace(pid=pid, usedGpuMemory=used) for pid, used in self.devices[handle]]


def test_nvml_is_initialised_once_and_only_this_process_is_counted():
    me, other = os.getpid(), os.getpid() + 1
    nvml = FakeNvml([[(me, 3 << 30), (other, 9 << 30)], [(me, 1 << 30), (me, None)]])
    probe = ProcessVram(lambda: nvml, no_amdsmi)
    meter = UsageMeter(vram=True, vram_probe=probe)
    for _ in range(5):  # five jobs
        meter.start()
        assert meter.finish().peak_vram_bytes == 4 << 30
    assert (nvml.inits, nvml.shutdowns) == (1, 0)


def test_a_library_that_cannot_start_is_asked_once():
    nvml = FakeNvml([], fail_init=True)
    probe = ProcessVram(lambda: nvml, no_amdsmi)
    assert [probe() for _ in range(3)] == [None, None, None]
    assert nvml.inits == 1


def test_no_library_at_all_is_unknown():
    def missing():
        raise ModuleNotFoundError("No module named 'pynvml'")

    assert ProcessVram(missing, no_amdsmi)() is None


def test_a_device_that_vanishes_mid_query_is_unknown_that_time():
    nvml = FakeNvml([[(os.getpid(), 1 << 30)]])
    probe = ProcessVram(lambda: nvml, no_amdsmi)
    assert probe() == 1 << 30
    nvml.devices = []
    nvml.nvmlDeviceGetCount = lambda: 1  # type: ignore[method-assign]  # a count NVML still reports
    assert probe() is None
    assert nvml.inits == 1


def test_a_cpu_worker_does_not_ask():
    nvml = FakeNvml([[(os.getpid(), 1 << 30)]])
    meter = UsageMeter(vram=False, vram_probe=ProcessVram(lambda: nvml, no_amdsmi))
    meter.start()
    assert meter.finish().peak_vram_bytes is None and nvml.inits == 0
