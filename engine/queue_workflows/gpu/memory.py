"""GPU memory read in-process from NVML or amdsmi: how full the devices are, and what given processes hold.

The library is initialised once per process, on the first ask, and kept (`nvmlInit` costs
milliseconds with a driver loaded); NVML is tried first, then amdsmi, and a process where
neither starts never tries again. Every read is bounded by a deadline (a wedged GPU can hang
a library call for minutes) and never raises: what cannot be read is None. A device is what a
claim reserves on: a GPU, a MIG instance (NVML lists processes per instance), an AMD partition;
a read may be limited to some devices by UUID (a job's, or its worker's).
"""

from __future__ import annotations

import importlib
import logging
import threading
from collections.abc import Callable, Collection
from typing import Any

from queue_workflows.telemetry.nvml_mig import nvml_devices
from queue_workflows.telemetry.tools import GuardedCall

log = logging.getLogger(__name__)

Importer = Callable[[], Any]


def import_nvml() -> Any:
    return importlib.import_module("pynvml")


def import_amdsmi() -> Any:
    return importlib.import_module("amdsmi")


class GpuMemory:
    def __init__(self, import_nvml: Importer = import_nvml, import_amdsmi: Importer = import_amdsmi, *, timeout: float = 2.0) -> None:
        self._imports = (("nvml", import_nvml), ("amdsmi", import_amdsmi))
        self.timeout = timeout
        self._backend: tuple[str, Any] | None = None
        self._tried = False
        self._lock = threading.Lock()
        self._guard = GuardedCall("gpu-memory")
        self.watched: frozenset[str] | None = None  # the devices the throttle reads (a gpu worker's); None: every one

    def watch(self, uuids: Collection[str] | None) -> None:
        """Limit the throttle's reading to these devices (a gpu worker's own); None or empty: every device."""
        self.watched = frozenset(uuids) if uuids else None

    def library(self) -> tuple[str, Any] | None:
        """('nvml' | 'amdsmi', module) once one has initialised; None where neither can."""
        with self._lock:
            if not self._tried:
                self._tried = True
                self._backend = self._first_that_starts()
            return self._backend

    def _first_that_starts(self) -> tuple[str, Any] | None:
        for kind, import_lib in self._imports:
            try:
                lib = import_lib()
                (lib.nvmlInit if kind == "nvml" else lib.amdsmi_init)()
                return kind, lib
            except Exception as exc:  # noqa: BLE001 - no library, no driver, a broken install: the next one
                log.debug("%s unavailable for GPU memory: %s", kind, exc)
        return None

    @property
    def absent(self) -> bool:
        """Neither library started (asked once already): every read is None."""
        return self._tried and self._backend is None

    def _read(self, fn: Callable[[str, Any], Any]) -> Any:
        if self.absent:
            return None  # no thread for a call that can only say so

        def call() -> Any:
            backend = self.library()
            return None if backend is None else fn(*backend)

        return self._guard(call, timeout=self.timeout)

    def device_percent(self, *, besides: Collection[int] = (), uuids: Collection[str] | None = None) -> float | None:
        """The fullest device's used memory, in percent of its total, less what the processes `besides`
        hold there (a worker's own warm models are no pressure on itself); None without a readable GPU.
        `uuids`: only those devices (default: the watched ones)."""
        pids = frozenset(besides)
        only = self.watched if uuids is None else frozenset(uuids)
        return self._read(lambda kind, lib: _device_percent(kind, lib, pids.__contains__, only))

    def process_bytes(self, mine: Collection[int] | Callable[[int], bool], *, uuids: Collection[str] | None = None) -> int | None:
        """GPU memory the processes `mine` holds (pids, or a test of a pid), summed over every device
        (or over `uuids` only: a job's reserved devices); None when it cannot be asked. Only the pids
        the GPU lists are tested."""
        test = mine if callable(mine) else frozenset(mine).__contains__
        only = frozenset(uuids) if uuids else None
        return self._read(lambda kind, lib: _process_bytes(kind, lib, test, only))


def _uuid(kind: str, lib: Any, handle: Any) -> str:
    raw = lib.nvmlDeviceGetUUID(handle) if kind == "nvml" else lib.amdsmi_get_gpu_device_uuid(handle)
    return raw.decode() if isinstance(raw, bytes) else str(raw)


def _handles(kind: str, lib: Any, only: frozenset[str] | None = None) -> list[Any]:
    """The devices' handles (a GPU in MIG mode stands for its instances; each AMD partition has its own), or those
    of `only`; every one when none of `only` is listed here (a UUID another source spelled otherwise reads too much, not nothing)."""
    handles = [d.handle for d in nvml_devices(lib)] if kind == "nvml" else list(lib.amdsmi_get_processor_handles())
    return handles if only is None else [h for h in handles if _uuid(kind, lib, h) in only] or handles


def _used_total(kind: str, lib: Any, handle: Any) -> tuple[float, float]:
    if kind == "nvml":
        info = lib.nvmlDeviceGetMemoryInfo(handle)
        return float(info.used), float(info.total)
    vram = lib.amdsmi_get_gpu_vram_usage(handle)  # MB, both
    return float(vram["vram_used"]), float(vram["vram_total"])


def _device_percent(kind: str, lib: Any, besides: Callable[[int], bool], only: frozenset[str] | None) -> float | None:
    shares = []
    for handle in _handles(kind, lib, only):
        used, total = _used_total(kind, lib, handle)
        own = _device_process_bytes(kind, lib, handle, besides)
        if own:
            used = max(0.0, used - (own if kind == "nvml" else own / 2**20))  # amdsmi's used and total are in MB
        if total > 0:
            shares.append(100.0 * used / total)
    return max(shares, default=None)


def _amd_process_vram(lib: Any, handle: Any, proc: Any) -> tuple[int | None, int]:
    """(pid, VRAM bytes) of one amdsmi process entry: a dict in recent releases, a handle to look up in older ones."""
    info = proc if isinstance(proc, dict) else lib.amdsmi_get_gpu_process_info(handle, proc)
    usage = info.get("memory_usage") or {}
    vram = usage.get("vram_mem") if isinstance(usage, dict) else None
    return info.get("pid"), int(vram if vram is not None else info.get("mem") or 0)


def _device_process_bytes(kind: str, lib: Any, handle: Any, mine: Callable[[int], bool]) -> int:
    total = 0
    if kind == "nvml":
        for proc in lib.nvmlDeviceGetComputeRunningProcesses(handle):
            if proc.usedGpuMemory and mine(proc.pid):
                total += int(proc.usedGpuMemory)
    else:
        for proc in lib.amdsmi_get_gpu_process_list(handle):
            pid, used = _amd_process_vram(lib, handle, proc)
            if used and pid is not None and mine(pid):
                total += used
    return total


def _process_bytes(kind: str, lib: Any, mine: Callable[[int], bool], only: frozenset[str] | None) -> int:
    return sum(_device_process_bytes(kind, lib, handle, mine) for handle in _handles(kind, lib, only))


gpu_memory = GpuMemory()
"""This process's reader: the throttle's default probe and the gpu worker's VRAM sampler share it."""
