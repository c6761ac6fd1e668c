"""AMD GPUs: the `amdsmi` library first, then the `amd-smi` and `rocm-smi --json` tools.

Like the NVIDIA sources, each returns None when unavailable and a list when it answered;
an unreadable device is left out and an unreadable field is None. The tools' JSON keys
vary between ROCm releases, so the parsers look fields up by the names each release used.
"""

from __future__ import annotations

import json
import logging
import re
from types import ModuleType
from typing import Any

from queue_workflows.telemetry.gpu_sample import GpuSample, text_or_none, to_bytes, to_float
from queue_workflows.telemetry.tools import GuardedCall, optional_module, run_tool

log = logging.getLogger(__name__)

AMD_SMI_METRIC_ARGS = ["metric", "--usage", "--mem-usage", "--temperature", "--power", "--json"]
AMD_SMI_STATIC_ARGS = ["static", "--asic", "--json"]
ROCM_SMI_ARGS = ["--showuse", "--showmeminfo", "vram", "--showtemp", "--showpower", "--showproductname", "--showuniqueid", "--json"]
_CARD_RE = re.compile(r"^card(\d+)$")
_amdsmi_call = GuardedCall("amdsmi")


def load_amdsmi() -> ModuleType | None:
    return optional_module("amdsmi")


def amdsmi_samples(*, timeout: float = 2.0, lib: Any = None) -> list[GpuSample] | None:
    """Every AMD GPU the `amdsmi` library can read; `lib` stands in for the module (tests pass a fake)."""
    amdsmi = lib if lib is not None else load_amdsmi()
    if amdsmi is None:
        return None
    return _amdsmi_call(lambda: _read_amdsmi(amdsmi), timeout=timeout)


def _read_amdsmi(amdsmi: Any) -> list[GpuSample] | None:
    try:
        amdsmi.amdsmi_init()
    except Exception as exc:  # noqa: BLE001 - no amdgpu driver
        log.debug("amdsmi unavailable: %s", exc)
        return None
    try:
        samples = []
        for index, handle in enumerate(amdsmi.amdsmi_get_processor_handles()):
            sample = _amdsmi_device(amdsmi, index, handle)
            if sample is not None:
                samples.append(sample)
        return samples
    finally:
        try:
            amdsmi.amdsmi_shut_down()
        except Exception:  # noqa: BLE001
            pass


def _amdsmi_device(amdsmi: Any, index: int, handle: Any) -> GpuSample | None:
    def field(fn_name: str, *args: Any) -> Any:
        try:
            return getattr(amdsmi, fn_name)(handle, *args)
        except Exception:  # noqa: BLE001 - not supported on this board, or the device went away
            return None

    vram = field("amdsmi_get_gpu_vram_usage")
    if not isinstance(vram, dict):
        log.warning("amdsmi: GPU %d unreadable: left out", index)
        return None
    asic = field("amdsmi_get_gpu_asic_info") or {}
    activity = field("amdsmi_get_gpu_activity") or {}
    power = field("amdsmi_get_power_info") or {}
    temp_type = getattr(getattr(amdsmi, "AmdSmiTemperatureType", None), "EDGE", None)
    temp_metric = getattr(getattr(amdsmi, "AmdSmiTemperatureMetric", None), "CURRENT", None)
    watts = to_float(power.get("current_socket_power"))
    return GpuSample(
        index=index,
        name=text_or_none(asic.get("market_name")) or f"gpu{index}",
        uuid=text_or_none(field("amdsmi_get_gpu_device_uuid")),
        source="amdsmi",
        util_percent=to_float(activity.get("gfx_activity")),
        memory_used_bytes=to_bytes(vram.get("vram_used"), "MiB"),
        memory_total_bytes=to_bytes(vram.get("vram_total"), "MiB"),
        temperature_c=to_float(field("amdsmi_get_temp_metric", temp_type, temp_metric)),
        power_w=watts if watts is not None else to_float(power.get("average_socket_power")),
    )


def amd_smi_samples(*, timeout: float = 2.0) -> list[GpuSample] | None:
    metric = run_tool("amd-smi", AMD_SMI_METRIC_ARGS, timeout=timeout)
    if metric is None:
        return None
    static = run_tool("amd-smi", AMD_SMI_STATIC_ARGS, timeout=timeout)
    return parse_amd_smi(metric, static)


def _entries(text: str | None) -> list[dict[str, Any]]:
    try:
        data = json.loads(text) if text else []
    except ValueError:
        return []
    if isinstance(data, dict):
        data = data.get("gpu_data", [])
    return [entry for entry in data if isinstance(entry, dict)] if isinstance(data, list) else []


def _measure(value: Any, default_unit: str) -> tuple[Any, str]:
    """amd-smi prints either a bare number or {"value": N, "unit": "MB"}, depending on the release."""
    if isinstance(value, dict):
        return value.get("value"), str(value.get("unit") or default_unit)
    return value, default_unit


def _section(entry: dict[str, Any], name: str) -> dict[str, Any]:
    value = entry.get(name)
    return value if isinstance(value, dict) else {}


def _first_number(section: dict[str, Any], *keys: str) -> float | None:
    for key in keys:
        number = to_float(_measure(section.get(key), "")[0])
        if number is not None:
            return number
    return None


def parse_amd_smi(metric: str, static: str | None = None) -> list[GpuSample] | None:
    """`amd-smi metric ... --json` (and `static --asic --json` for names); None when nothing parses."""
    names: dict[int, str] = {}
    for entry in _entries(static):
        if isinstance(entry.get("gpu"), int):
            name = text_or_none(_section(entry, "asic").get("market_name"))
            if name:
                names[entry["gpu"]] = name
    samples = []
    for entry in _entries(metric):
        index = entry.get("gpu")
        mem = _section(entry, "mem_usage")
        if not isinstance(index, int) or isinstance(index, bool) or index < 0 or not mem:
            continue
        usage, power, temps = _section(entry, "usage"), _section(entry, "power"), _section(entry, "temperature")
        samples.append(
            GpuSample(
                index=index,
                name=names.get(index, f"gpu{index}"),
                uuid=None,
                source="amd-smi",
                util_percent=to_float(_measure(usage.get("gfx_activity"), "%")[0]),
                memory_used_bytes=to_bytes(*_measure(mem.get("used_vram"), "MB")),
                memory_total_bytes=to_bytes(*_measure(mem.get("total_vram"), "MB")),
                temperature_c=_first_number(temps, "edge", "hotspot"),
                power_w=_first_number(power, "socket_power", "current_socket_power", "average_socket_power"),
            )
        )
    return samples or None


def rocm_smi_samples(*, timeout: float = 2.0) -> list[GpuSample] | None:
    text = run_tool("rocm-smi", ROCM_SMI_ARGS, timeout=timeout)
    return None if text is None else parse_rocm_smi(text)


def _first(card: dict[str, Any], *needles: str) -> Any:
    """The value of the first key containing one of `needles` (in the needles' order), else None."""
    for needle in needles:
        for key, value in card.items():
            if needle.lower() in key.lower():
                return value
    return None


def parse_rocm_smi(text: str) -> list[GpuSample] | None:
    """`rocm-smi --json` output: {"card0": {...}, "system": {...}}; None when no card parses."""
    try:
        data = json.loads(text)
    except ValueError:
        return None
    if not isinstance(data, dict):
        return None
    samples = []
    for key, card in data.items():
        match = _CARD_RE.match(str(key))
        total = to_bytes(_first(card, "VRAM Total Memory (B)"), "B") if isinstance(card, dict) else None
        if match is None or not isinstance(card, dict) or total is None:
            continue
        index = int(match.group(1))
        samples.append(
            GpuSample(
                index=index,
                name=text_or_none(_first(card, "Card series", "Device Name", "Card model")) or f"gpu{index}",
                uuid=text_or_none(_first(card, "Unique ID")),
                source="rocm-smi",
                util_percent=to_float(_first(card, "GPU use (%)")),
                memory_used_bytes=to_bytes(_first(card, "VRAM Total Used Memory (B)"), "B"),
                memory_total_bytes=total,
                temperature_c=to_float(_first(card, "(Sensor edge)", "(Sensor junction)", "Temperature")),
                power_w=to_float(_first(card, "Graphics Package Power (W)", "Power (W)")),
            )
        )
    return sorted(samples, key=lambda s: s.index) or None
