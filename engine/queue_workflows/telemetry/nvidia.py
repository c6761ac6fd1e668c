"""NVIDIA GPUs: NVML (the `nvidia-ml-py` binding, module `pynvml`) first, `nvidia-smi` when NVML is not there.

Each source returns None when it is unavailable (no library, no driver, no tool, a hang,
output it cannot read), so the caller tries the next one; a list, possibly empty, when it
answered. A device that is lost or unreadable is left out; the others are still reported.
"""

from __future__ import annotations

import logging
from types import ModuleType
from typing import Any

from queue_workflows.telemetry.gpu_sample import GpuSample, text_or_none, to_bytes, to_float
from queue_workflows.telemetry.nvml_mig import NvmlDevice, devices_at, is_lost
from queue_workflows.telemetry.tools import GuardedCall, optional_module, run_tool

log = logging.getLogger(__name__)

SMI_FIELDS = ("index", "name", "uuid", "utilization.gpu", "memory.used", "memory.total", "temperature.gpu", "power.draw")
SMI_ARGS = [f"--query-gpu={','.join(SMI_FIELDS)}", "--format=csv,noheader,nounits"]
_LOST_MARKERS = ("gpu is lost", "unknown error", "unable to determine")
_nvml_call = GuardedCall("nvml")


def load_pynvml() -> ModuleType | None:
    return optional_module("pynvml")


def nvml_samples(*, timeout: float = 2.0, lib: Any = None) -> list[GpuSample] | None:
    """Every NVIDIA device NVML can read; `lib` stands in for `pynvml` (tests pass a fake)."""
    nvml = lib if lib is not None else load_pynvml()
    if nvml is None:
        return None
    return _nvml_call(lambda: _read_nvml(nvml), timeout=timeout)


def _read_nvml(nvml: Any) -> list[GpuSample] | None:
    try:
        nvml.nvmlInit()
    except Exception as exc:  # noqa: BLE001 - NVMLError_LibraryNotFound, DriverNotLoaded...
        log.debug("NVML unavailable: %s", exc)
        return None
    try:
        samples = []
        for index in range(int(nvml.nvmlDeviceGetCount())):
            try:
                found = devices_at(nvml, index)
            except Exception as exc:  # noqa: BLE001 - GpuIsLost, Unknown: the GPU is absent
                log.warning("NVML: GPU %d unreadable (%s): left out", index, exc)
                continue
            for device in found:
                sample = _nvml_device(nvml, device)
                if sample is not None:
                    samples.append(sample)
        return samples
    finally:
        try:
            nvml.nvmlShutdown()
        except Exception:  # noqa: BLE001
            pass


class _DeviceLost(Exception):
    pass


def _nvml_device(nvml: Any, device: NvmlDevice) -> GpuSample | None:
    """The device's readings (a GPU's, or a MIG instance's with its parent's UUID); None when it is lost mid-read.

    A MIG instance answers memory, name and UUID; utilization, temperature and power are its
    parent's and read NotSupported there, so they are None.
    """
    index, handle = device.index, device.handle

    def field(fn: Any, *args: Any) -> Any:
        try:
            return fn(handle, *args)
        except Exception as exc:  # noqa: BLE001 - NotSupported on this board: the field is unknown
            if is_lost(exc):
                raise _DeviceLost(str(exc)) from None
            return None

    try:
        memory = field(nvml.nvmlDeviceGetMemoryInfo)
        rates = field(nvml.nvmlDeviceGetUtilizationRates)
        power_mw = to_float(field(nvml.nvmlDeviceGetPowerUsage))
        return GpuSample(
            index=index,
            name=text_or_none(nvml.nvmlDeviceGetName(handle)) or f"gpu{index}",
            uuid=text_or_none(field(nvml.nvmlDeviceGetUUID)),
            source="nvml",
            util_percent=to_float(getattr(rates, "gpu", None)),
            memory_used_bytes=to_bytes(getattr(memory, "used", None), "B"),
            memory_total_bytes=to_bytes(getattr(memory, "total", None), "B"),
            temperature_c=to_float(field(nvml.nvmlDeviceGetTemperature, getattr(nvml, "NVML_TEMPERATURE_GPU", 0))),
            power_w=power_mw / 1000.0 if power_mw is not None else None,
            parent=None if device.parent is None else text_or_none(nvml.nvmlDeviceGetUUID(device.parent)),
        )
    except Exception as exc:  # noqa: BLE001 - GpuIsLost, Unknown: the device is absent
        log.warning("NVML: GPU %d unreadable (%s): left out", index, exc)
        return None


def nvidia_smi_samples(*, timeout: float = 2.0) -> list[GpuSample] | None:
    text = run_tool("nvidia-smi", SMI_ARGS, timeout=timeout)
    return None if text is None else parse_nvidia_smi(text)


def parse_nvidia_smi(text: str) -> list[GpuSample] | None:
    """Rows of `nvidia-smi --query-gpu=<SMI_FIELDS> --format=csv,noheader,nounits`; None when no row parses."""
    samples = []
    for line in text.splitlines():
        cells = [cell.strip() for cell in line.split(",")]
        if len(cells) != len(SMI_FIELDS) or any(m in line.lower() for m in _LOST_MARKERS):
            continue
        index = to_float(cells[0])
        if index is None or index != int(index) or index < 0 or not cells[1]:
            continue
        samples.append(
            GpuSample(
                index=int(index),
                name=cells[1],
                uuid=text_or_none(cells[2]),
                source="nvidia-smi",
                util_percent=to_float(cells[3]),
                memory_used_bytes=to_bytes(cells[4], "MiB"),
                memory_total_bytes=to_bytes(cells[5], "MiB"),
                temperature_c=to_float(cells[6]),
                power_w=to_float(cells[7]),
            )
        )
    return samples or None


__all__ = ["SMI_ARGS", "nvidia_smi_samples", "nvml_samples", "parse_nvidia_smi"]
