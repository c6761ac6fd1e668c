"""A demo cpu node: `run(inputs)` returns the context delta."""

from __future__ import annotations

from typing import Any


def run(inputs: dict[str, Any]) -> dict[str, Any]:
    x = int(inputs.get("x", 0))
    return {"square": x * x}
