"""The fake NVML's driver side (tests/support/fake_nvml): a process's allocation beyond what its device has
free raises CUDA's out-of-memory error, which the engine takes for an OOM, and allocations at once lose nothing."""

from __future__ import annotations

import json
import threading
from pathlib import Path

import pytest
from test_gpu_memory import fake_nvml

from queue_workflows.gpu.errors import classify

GIB = 1 << 30


def host(path: Path, devices: int = 2) -> str:
    fake_nvml.write_state(str(path), {"init_error": None, "devices": [
        {"name": "Sim", "uuid": f"GPU-sim-{i}", "total": 24 * GIB, "base_used": GIB, "procs": {}} for i in range(devices)]})
    return str(path)


def held(state: str) -> list[dict[str, int]]:
    return [d["procs"] for d in json.loads(Path(state).read_text())["devices"]]


def test_an_allocation_beyond_what_is_free_is_an_oom_and_takes_nothing(tmp_path: Path) -> None:
    state = host(tmp_path / "nvml.json")
    fake_nvml.allocate(state, 101, 15 * GIB, "GPU-sim-1")
    fake_nvml.allocate(state, 101, 3 * GIB, 1)
    with pytest.raises(fake_nvml.OutOfMemoryError, match=r"CUDA out of memory. Tried to allocate 6.00 GiB \(5.00 GiB free on GPU-sim-1\)") as refused:
        fake_nvml.allocate(state, 102, 6 * GIB, "GPU-sim-1")  # 24 - 1 base - 18 = 5 GB free
    assert classify(refused.value) == "oom"
    assert held(state) == [{}, {"101": 18 * GIB}] and fake_nvml.ooms(state) == 1
    fake_nvml.allocate(state, 102, 6 * GIB, "GPU-sim-0")  # the other device has room
    fake_nvml.release(state, 101)
    assert held(state) == [{"102": 6 * GIB}, {}]


def test_allocations_at_once_lose_nothing(tmp_path: Path) -> None:
    state = host(tmp_path / "nvml.json", devices=1)

    def take(pid: int) -> None:
        for _ in range(20):
            fake_nvml.allocate(state, pid, GIB // 8, 0)

    threads = [threading.Thread(target=take, args=(pid,)) for pid in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(30)
    assert held(state) == [{str(pid): 20 * (GIB // 8) for pid in range(8)}]
