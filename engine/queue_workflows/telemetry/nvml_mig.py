"""NVML's devices as the claim counts them: a physical GPU, or, in MIG mode, each of its MIG instances instead.

A MIG instance has its own memory, its own UUID ("MIG-...") and its own process list, and CUDA
addresses it by that UUID; the GPU that holds it is no device of its own while MIG is enabled.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class NvmlDevice:
    index: int  # the physical GPU's NVML index (an instance shares its parent's)
    handle: Any
    parent: Any = None  # the physical GPU's handle, for a MIG instance


def nvml_error_is(exc: BaseException, name: str) -> bool:
    """Whether `exc` is pynvml's NVMLError_<name> (matched by class name, so a stand-in binding's count too)."""
    return any(cls.__name__ == f"NVMLError_{name}" for cls in type(exc).__mro__)


def is_lost(exc: BaseException) -> bool:
    text = f"{type(exc).__name__} {exc}".lower()
    return "gpuislost" in text.replace("_", "") or "gpu is lost" in text


def mig_instances(nvml: Any, handle: Any) -> list[Any] | None:
    """The handles of the GPU's MIG instances while MIG is enabled (current mode, not pending); None when it is not.

    A GPU without MIG support raises NotSupported (as does a binding too old to ask): a plain
    device. Instance indexes run to the GPU's maximum with gaps where none was created
    (NotFound), so a missing index is skipped. A lost GPU raises, as every other read does.
    """
    get_mode = getattr(nvml, "nvmlDeviceGetMigMode", None)
    if get_mode is None:
        return None
    try:
        current = get_mode(handle)[0]
    except Exception as exc:  # noqa: BLE001 - NotSupported: no MIG on this board
        if is_lost(exc):
            raise
        if not nvml_error_is(exc, "NotSupported"):
            log.debug("NVML: MIG mode unreadable (%s): a plain device", exc)
        return None
    if current != getattr(nvml, "NVML_DEVICE_MIG_ENABLE", 1):
        return None
    instances = []
    for i in range(int(nvml.nvmlDeviceGetMaxMigDeviceCount(handle))):
        try:
            instances.append(nvml.nvmlDeviceGetMigDeviceHandleByIndex(handle, i))
        except Exception as exc:  # noqa: BLE001 - NotFound: no instance at this index
            if not nvml_error_is(exc, "NotFound"):
                raise
    return instances


def devices_at(nvml: Any, index: int) -> list[NvmlDevice]:
    """The device(s) of the GPU at `index`: itself, or its MIG instances (none while MIG has none)."""
    handle = nvml.nvmlDeviceGetHandleByIndex(index)
    instances = mig_instances(nvml, handle)
    if instances is None:
        return [NvmlDevice(index, handle)]
    return [NvmlDevice(index, mig, parent=handle) for mig in instances]


def nvml_devices(nvml: Any) -> list[NvmlDevice]:
    """Every device NVML shows, in index order; the caller has initialised NVML."""
    return [device for index in range(int(nvml.nvmlDeviceGetCount())) for device in devices_at(nvml, index)]


__all__ = ["NvmlDevice", "devices_at", "is_lost", "mig_instances", "nvml_devices", "nvml_error_is"]
