"""A DAG node module the worker tests run on cpu/gpu queues: `run(inputs)` sleeps, then echoes or raises."""

from __future__ import annotations

import os
import time
from typing import Any


def run(inputs: dict[str, Any]) -> dict[str, Any]:
    time.sleep(float(inputs.get("sleep", 0)))
    if inputs.get("raise"):
        raise RuntimeError(inputs["raise"])
    return {"pid": os.getpid()}
