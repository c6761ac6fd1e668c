"""A stand-in for `pynvml` (nvidia-ml-py) that a real worker process imports when this folder is on its PYTHONPATH.

The devices live in the JSON file named by QW_FAKE_NVML, re-read on every call, so a test (or a
job) changes them while the worker runs: {"init_error": null | "text", "devices": [{"name", "uuid",
"total", "base_used", "procs": {"<pid>": bytes}}]}. A device's used memory is its base plus what
its processes hold (per-process accounting, as NVML reports it). Each per-process query appends a
line to `<file>.queries`, so a job can wait until it has been sampled. `allocate` is the driver's
side: a process takes memory, or gets CUDA's out-of-memory error when the device has less free.
"""

from __future__ import annotations

import fcntl
import json
import os
from collections.abc import Iterator
from contextlib import contextmanager
from types import SimpleNamespace
from typing import Any

NVML_TEMPERATURE_GPU = 0


class NVMLError(Exception):
    pass


def _state() -> dict[str, Any]:
    path = os.environ.get("QW_FAKE_NVML")
    if not path:
        raise NVMLError("NVML Shared Library Not Found")
    with open(path) as f:
        return json.load(f)


def _device(handle: int) -> dict[str, Any]:
    devices = _state()["devices"]
    if not 0 <= handle < len(devices):
        raise NVMLError("Invalid Argument")
    return devices[handle]


def nvmlInit() -> None:
    error = _state().get("init_error")
    if error:
        raise NVMLError(error)


def nvmlShutdown() -> None:
    pass


def nvmlDeviceGetCount() -> int:
    return len(_state()["devices"])


def nvmlDeviceGetHandleByIndex(index: int) -> int:
    _device(index)
    return index


def nvmlDeviceGetName(handle: int) -> str:
    return str(_device(handle).get("name", "Fake GPU"))


def nvmlDeviceGetUUID(handle: int) -> str:
    return str(_device(handle).get("uuid", f"GPU-fake-{handle}"))


def nvmlDeviceGetMemoryInfo(handle: int) -> SimpleNamespace:
    dev = _device(handle)
    used = int(dev.get("base_used", 0)) + sum(int(v) for v in dev.get("procs", {}).values())
    return SimpleNamespace(total=int(dev["total"]), used=used, free=max(0, int(dev["total"]) - used))


def nvmlDeviceGetComputeRunningProcesses(handle: int) -> list[SimpleNamespace]:
    dev = _device(handle)
    with open(os.environ["QW_FAKE_NVML"] + ".queries", "a") as f:
        f.write(f"{os.getpid()}\n")
    return [SimpleNamespace(pid=int(pid), usedGpuMemory=int(used)) for pid, used in dev.get("procs", {}).items()]


def nvmlDeviceGetUtilizationRates(handle: int) -> SimpleNamespace:
    _device(handle)
    return SimpleNamespace(gpu=0, memory=0)


def nvmlDeviceGetTemperature(handle: int, sensor: int) -> int:
    _device(handle)
    return 40


def nvmlDeviceGetPowerUsage(handle: int) -> int:
    _device(handle)
    return 50_000


# -- the test's side (not part of pynvml) ----------------------------------------------------


def write_state(path: str, state: dict[str, Any]) -> None:
    """Replace the devices at once (a rename), so a reader never sees half a file."""
    tmp = f"{path}.{os.getpid()}.tmp"
    with open(tmp, "w") as f:
        json.dump(state, f)
    os.replace(tmp, path)


@contextmanager
def _locked(path: str) -> Iterator[dict[str, Any]]:
    """The state, read and written back under one lock: processes changing it at once lose no change."""
    with open(path + ".lock", "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        with open(path) as f:
            state = json.load(f)
        yield state
        write_state(path, state)


def set_process_memory(path: str, pid: int, nbytes: int, device: int = 0) -> None:
    """What process `pid` holds on `device` from now on (0 drops it from the device's process list)."""
    with _locked(path) as state:
        procs = state["devices"][device].setdefault("procs", {})
        if nbytes:
            procs[str(pid)] = nbytes
        else:
            procs.pop(str(pid), None)


class OutOfMemoryError(RuntimeError):
    """What `allocate` raises: named as torch's, and worded as CUDA's, so the engine tells it (gpu/errors.py)."""


def _index(state: dict[str, Any], device: int | str) -> int:
    if isinstance(device, int):
        return device
    uuids = [str(d.get("uuid", f"GPU-fake-{i}")) for i, d in enumerate(state["devices"])]
    return uuids.index(device)


def allocate(path: str, pid: int, nbytes: int, device: int | str = 0) -> None:
    """Process `pid` takes `nbytes` more on `device` (index or UUID), or, when the device has less free,
    raises OutOfMemoryError and appends a line to `<file>.ooms`; one lock over both, as the driver's is."""
    with _locked(path) as state:
        dev = state["devices"][_index(state, device)]
        used = int(dev.get("base_used", 0)) + sum(int(v) for v in dev.get("procs", {}).values())
        free = int(dev["total"]) - used
        if nbytes > free:
            with open(path + ".ooms", "a") as f:
                f.write(f"{pid} {dev.get('uuid')} {nbytes} {free}\n")
            raise OutOfMemoryError(f"CUDA out of memory. Tried to allocate {nbytes / 2**30:.2f} GiB "
                                   f"({free / 2**30:.2f} GiB free on {dev.get('uuid')})")
        procs = dev.setdefault("procs", {})
        procs[str(pid)] = int(procs.get(str(pid), 0)) + nbytes


def release(path: str, pid: int) -> None:
    """Process `pid` gives back everything it holds, on every device."""
    with _locked(path) as state:
        for dev in state["devices"]:
            dev.get("procs", {}).pop(str(pid), None)


def ooms(path: str) -> int:
    """Allocations refused so far."""
    try:
        with open(path + ".ooms") as f:
            return sum(1 for _ in f)
    except FileNotFoundError:
        return 0


def queries(path: str) -> int:
    """Per-process queries so far."""
    try:
        with open(path + ".queries") as f:
            return sum(1 for _ in f)
    except FileNotFoundError:
        return 0
