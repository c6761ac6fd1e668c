"""A gpu node and the models a test gpu worker registers at start (QW_APP=qw_gpu_nodes)."""

from __future__ import annotations

import time
from typing import Any

from queue_workflows import model_registry


def run(inputs: dict[str, Any]) -> dict[str, Any]:
    """Returns the model the worker loaded for this job (None for a job that names none), after `sleep` s."""
    time.sleep(float(inputs.get("sleep", 0)))
    return {"model": model_registry.current()}


def _broken() -> Any:
    raise RuntimeError("weights not found")


def register_models() -> None:
    model_registry.register(model_registry.ModelSpec("warm", lambda: {"model": "warm"}, est_vram_gb=1))
    model_registry.register(model_registry.ModelSpec("broken", _broken, est_vram_gb=1))


model_registry.set_builtin_model_registrar(register_models)
