"""A stand-in for `pynvml` (nvidia-ml-py) that a real worker process imports when this folder is on its PYTHONPATH.

The devices live in the JSON file named by QW_FAKE_NVML, re-read on every call, so a test (or a
job) changes them while the worker runs: {"init_error": null | "text", "devices": [{"name", "uuid",
"total", "base_used", "procs": {"<pid>": bytes}}]}. A device's used memory is its base plus what
its processes hold (per-process accounting, as NVML reports it). Each per-process query appends a
line to `<file>.queries`, so a job can wait until it has been sampled. `allocate` is the driver's
side: a process takes memory, or gets CUDA's out-of-memory error when the device has less free.

MIG: a device with a "mig" list is a GPU in MIG mode ("mig_mode": 0 turns it off) whose entries are
its instances by index, each {"uuid": "MIG-...", "total", "base_used", "procs"} with memory and
processes of its own, or null where no instance was created (NotFound, as NVML). A device without
"mig" has no MIG support (NotSupported). A MIG instance's handle is (GPU index, instance index).
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
NVML_DEVICE_MIG_DISABLE = 0
NVML_DEVICE_MIG_ENABLE = 1

Handle = Any  # int: a GPU's index; (int, int): a MIG instance's (GPU, instance) indexes


class NVMLError(Exception):
    pass


class NVMLError_NotSupported(NVMLError):  # noqa: N801 - pynvml's own names
    pass


class NVMLError_NotFound(NVMLError):  # noqa: N801
    pass


class NVMLError_InvalidArgument(NVMLError):  # noqa: N801
    pass


def _state() -> dict[str, Any]:
    path = os.environ.get("QW_FAKE_NVML")
    if not path:
        raise NVMLError("NVML Shared Library Not Found")
    with open(path) as f:
        return json.load(f)


def _device(handle: Handle) -> dict[str, Any]:
    """The GPU's entry, or a MIG instance's."""
    devices = _state()["devices"]
    gpu, mig = (handle, None) if isinstance(handle, int) else handle
    if not 0 <= gpu < len(devices):
        raise NVMLError_InvalidArgument("Invalid Argument")
    if mig is None:
        return devices[gpu]
    instances = devices[gpu].get("mig") or []
    if not 0 <= mig < len(instances) or instances[mig] is None:
        raise NVMLError_NotFound("Not Found")
    return instances[mig]


def _mig_enabled(dev: dict[str, Any]) -> bool:
    return "mig" in dev and dev.get("mig_mode", NVML_DEVICE_MIG_ENABLE) == NVML_DEVICE_MIG_ENABLE


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


def nvmlDeviceGetUUID(handle: Handle) -> str:
    return str(_device(handle).get("uuid", f"GPU-fake-{handle}"))


def _used(dev: dict[str, Any]) -> int:
    own = int(dev.get("base_used", 0)) + sum(int(v) for v in dev.get("procs", {}).values())
    return own + sum(_used(i) for i in dev.get("mig") or [] if i is not None)  # a MIG GPU's: its instances'


def nvmlDeviceGetMemoryInfo(handle: Handle) -> SimpleNamespace:
    dev = _device(handle)
    used = _used(dev)
    return SimpleNamespace(total=int(dev["total"]), used=used, free=max(0, int(dev["total"]) - used))


def nvmlDeviceGetComputeRunningProcesses(handle: Handle) -> list[SimpleNamespace]:
    """A MIG instance's own processes; a GPU in MIG mode lists none (NVML's lists are per instance)."""
    dev = _device(handle)
    with open(os.environ["QW_FAKE_NVML"] + ".queries", "a") as f:
        f.write(f"{os.getpid()}\n")
    return [SimpleNamespace(pid=int(pid), usedGpuMemory=int(used)) for pid, used in dev.get("procs", {}).items()]


def nvmlDeviceGetMigMode(handle: Handle) -> list[int]:
    """[current, pending]; NotSupported on a GPU without MIG, and on an instance."""
    dev = _device(handle)
    if not isinstance(handle, int) or "mig" not in dev:
        raise NVMLError_NotSupported("Not Supported")
    mode = int(dev.get("mig_mode", NVML_DEVICE_MIG_ENABLE))
    return [mode, mode]


def nvmlDeviceGetMaxMigDeviceCount(handle: Handle) -> int:
    dev = _device(handle)
    if not isinstance(handle, int) or "mig" not in dev:
        raise NVMLError_NotSupported("Not Supported")
    return 7 if _mig_enabled(dev) else 0  # an A100's: the list's gaps are NotFound


def nvmlDeviceGetMigDeviceHandleByIndex(handle: Handle, index: int) -> Handle:
    dev = _device(handle)
    if not isinstance(handle, int) or not _mig_enabled(dev):
        raise NVMLError_InvalidArgument("Invalid Argument")
    _device((handle, index))
    return (handle, index)


def nvmlDeviceIsMigDeviceHandle(handle: Handle) -> bool:
    _device(handle)
    return not isinstance(handle, int)


def _whole_gpu(handle: Handle) -> None:
    """A reading only a whole GPU has: NotSupported on a MIG instance."""
    _device(handle)
    if not isinstance(handle, int):
        raise NVMLError_NotSupported("Not Supported")


def nvmlDeviceGetUtilizationRates(handle: Handle) -> SimpleNamespace:
    _whole_gpu(handle)
    return SimpleNamespace(gpu=0, memory=0)


def nvmlDeviceGetTemperature(handle: Handle, sensor: int) -> int:
    _whole_gpu(handle)
    return 40


def nvmlDeviceGetPowerUsage(handle: Handle) -> int:
    _whole_gpu(handle)
    return 50_000


# -- the test's side (not part of pynvml) ----------------------------------------------------


def write_state(path: str, state: dict[str, Any]) -> None:
    """Replace the devices at once (a rename), so a reader never sees half a file."""
    tmp = f"{path}.{os.getpid()}.tmp"
    with open(tmp, "w") as f:
        json.dump(state, f)
    os.replace(tmp, path)


def _entry(state: dict[str, Any], device: int | str) -> dict[str, Any]:
    """A GPU by index, or a GPU or MIG instance by UUID."""
    if isinstance(device, int):
        return state["devices"][device]
    for n, dev in enumerate(state["devices"]):
        if dev.get("uuid", f"GPU-fake-{n}") == device:
            return dev
        for entry in dev.get("mig") or []:
            if entry is not None and entry.get("uuid") == device:
                return entry
    raise KeyError(f"no fake device {device!r}")


@contextmanager
def _locked(path: str) -> Iterator[dict[str, Any]]:
    """The state, read and written back under one lock: processes changing it at once (one per job) lose no change."""
    with open(path + ".lock", "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            with open(path) as f:
                state = json.load(f)
            yield state
            write_state(path, state)
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)


def set_process_memory(path: str, pid: int, nbytes: int, device: int | str = 0) -> None:
    """What process `pid` holds on `device` (an index, or a GPU's or MIG instance's UUID) from now on (0 drops it)."""
    with _locked(path) as state:
        procs = _entry(state, device).setdefault("procs", {})
        if nbytes:
            procs[str(pid)] = nbytes
        else:
            procs.pop(str(pid), None)


class OutOfMemoryError(RuntimeError):
    """What `allocate` raises: named as torch's, and worded as CUDA's, so the engine tells it (gpu/errors.py)."""


def allocate(path: str, pid: int, nbytes: int, device: int | str = 0) -> None:
    """Process `pid` takes `nbytes` more on `device` (index or UUID), or, when the device has less free,
    raises OutOfMemoryError and appends a line to `<file>.ooms`; one lock over both, as the driver's is."""
    with _locked(path) as state:
        dev = _entry(state, device)
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
            for entry in [dev, *(i for i in dev.get("mig") or [] if i is not None)]:
                entry.get("procs", {}).pop(str(pid), None)


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
