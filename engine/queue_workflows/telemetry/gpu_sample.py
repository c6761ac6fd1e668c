"""One GPU's reading, whichever vendor tool produced it, and the number coercion every parser shares."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

MIB = 1024 * 1024
_UNIT_BYTES = {"b": 1, "kb": 1024, "kib": 1024, "mb": MIB, "mib": MIB, "gb": 1024 * MIB, "gib": 1024 * MIB}


@dataclass(frozen=True)
class GpuSample:
    """A device as one source saw it; a field the source could not read is None, never a guess."""

    index: int
    name: str
    uuid: str | None
    source: str
    util_percent: float | None
    memory_used_bytes: int | None
    memory_total_bytes: int | None
    temperature_c: float | None
    power_w: float | None
    parent: str | None = None  # a MIG instance's GPU (its UUID): the instance is the device, with memory of its own

    @property
    def memory_free_bytes(self) -> int | None:
        if self.memory_used_bytes is None or self.memory_total_bytes is None:
            return None
        return max(0, self.memory_total_bytes - self.memory_used_bytes)


def to_float(value: Any) -> float | None:
    """A finite float from a number or numeric text ('12', ' 35.5 W'); None for 'N/A', '[Not Supported]' and the like."""
    if isinstance(value, bool):
        return None
    if isinstance(value, (int, float)):
        number = float(value)
    elif isinstance(value, str):
        text = value.strip().split()[0] if value.strip() else ""
        try:
            number = float(text)
        except ValueError:
            return None
    else:
        return None
    return number if math.isfinite(number) else None


def to_bytes(value: Any, unit: str) -> int | None:
    """`value` in `unit` (B, KB, MB/MiB, GB...) as whole bytes; None when either is unreadable or negative."""
    number = to_float(value)
    scale = _UNIT_BYTES.get(unit.strip().lower())
    if number is None or scale is None or number < 0:
        return None
    return int(number * scale)


def text_or_none(value: Any) -> str | None:
    if isinstance(value, bytes):
        value = value.decode(errors="replace")
    if not isinstance(value, str):
        return None
    value = value.strip()
    return value if value and value.upper() not in ("N/A", "[N/A]") else None
