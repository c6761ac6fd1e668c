"""A stand-in for `amdsmi` (ROCm's Python binding) that a real worker process imports when this folder is on its PYTHONPATH.

The processors live in the JSON file named by QW_FAKE_AMDSMI, re-read on every call, so a test (or
a job) changes them while the worker runs: {"init_error": null | "text", "devices": [{"name",
"uuid", "total", "base_used", "procs": {"<pid>": bytes}}]}, bytes throughout. Each entry is one
processor handle: a whole GPU, or one partition of a GPU in CPX/NPS mode, which amdsmi lists as a
processor of its own with its own VRAM and UUID. Used VRAM is the base plus what the processes
hold (per-process accounting); amdsmi reports VRAM usage in MB.
"""

from __future__ import annotations

import fcntl
import json
import os
from contextlib import contextmanager
from typing import Any

MB = 1 << 20


class AmdSmiException(Exception):
    pass


class AmdSmiLibraryException(AmdSmiException):
    pass


class AmdSmiMemoryType:
    VRAM = 0


def _state() -> dict[str, Any]:
    path = os.environ.get("QW_FAKE_AMDSMI")
    if not path:
        raise AmdSmiLibraryException("libamd_smi.so not found")
    with open(path) as f:
        return json.load(f)


def _device(handle: int) -> dict[str, Any]:
    devices = _state()["devices"]
    if not isinstance(handle, int) or not 0 <= handle < len(devices):
        raise AmdSmiLibraryException("AMDSMI_STATUS_INVAL")
    return devices[handle]


def _used(dev: dict[str, Any]) -> int:
    return int(dev.get("base_used", 0)) + sum(int(v) for v in dev.get("procs", {}).values())


def amdsmi_init(*args: Any) -> None:
    error = _state().get("init_error")
    if error:
        raise AmdSmiLibraryException(error)


def amdsmi_shut_down() -> None:
    pass


def amdsmi_get_processor_handles() -> list[int]:
    return list(range(len(_state()["devices"])))


def amdsmi_get_gpu_device_uuid(handle: int) -> str:
    return str(_device(handle).get("uuid", f"fake-amd-{handle}"))


def amdsmi_get_gpu_asic_info(handle: int) -> dict[str, Any]:
    return {"market_name": _device(handle).get("name", "Fake MI300X")}


def amdsmi_get_gpu_vram_usage(handle: int) -> dict[str, int]:
    dev = _device(handle)
    return {"vram_total": int(dev["total"]) // MB, "vram_used": _used(dev) // MB}


def amdsmi_get_gpu_memory_total(handle: int, mem_type: int = AmdSmiMemoryType.VRAM) -> int:
    return int(_device(handle)["total"])


def amdsmi_get_gpu_memory_usage(handle: int, mem_type: int = AmdSmiMemoryType.VRAM) -> int:
    return _used(_device(handle))


def amdsmi_get_gpu_process_list(handle: int) -> list[dict[str, Any]]:
    """Recent releases' shape: one dict per process, its VRAM in bytes under memory_usage.vram_mem."""
    dev = _device(handle)
    with open(os.environ["QW_FAKE_AMDSMI"] + ".queries", "a") as f:
        f.write(f"{os.getpid()}\n")
    return [{"pid": int(pid), "name": "python", "mem": int(used), "memory_usage": {"gtt_mem": 0, "cpu_mem": 0, "vram_mem": int(used)}}
            for pid, used in dev.get("procs", {}).items()]


def amdsmi_get_gpu_activity(handle: int) -> dict[str, Any]:
    _device(handle)
    return {"gfx_activity": 0, "umc_activity": 0, "mm_activity": 0}


def amdsmi_get_power_info(handle: int) -> dict[str, Any]:
    _device(handle)
    return {"current_socket_power": 90, "average_socket_power": 90}


# -- the test's side (not part of amdsmi) ----------------------------------------------------


def write_state(path: str, state: dict[str, Any]) -> None:
    """Replace the processors at once (a rename), so a reader never sees half a file."""
    tmp = f"{path}.{os.getpid()}.tmp"
    with open(tmp, "w") as f:
        json.dump(state, f)
    os.replace(tmp, path)


@contextmanager
def _locked(path: str):
    """Writers in several processes (one per job) each read, change and replace the file: one at a time, or one's change is lost."""
    with open(path + ".lock", "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)


def set_process_memory(path: str, pid: int, nbytes: int, device: int | str = 0) -> None:
    """What process `pid` holds on `device` (an index or a UUID) from now on (0 drops it)."""
    with _locked(path):
        with open(path) as f:
            state = json.load(f)
        devices = state["devices"]
        entry = devices[device] if isinstance(device, int) else next(d for d in devices if d.get("uuid") == device)
        procs = entry.setdefault("procs", {})
        if nbytes:
            procs[str(pid)] = nbytes
        else:
            procs.pop(str(pid), None)
        write_state(path, state)
