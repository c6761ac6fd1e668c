"""Face: the seed's `queue_workflows.model_registry`; models live in `queue_workflows.gpu`.

`current()` is the model loaded for the gpu job running now (None outside one).
"""

from __future__ import annotations

from queue_workflows.gpu.cache import ModelCache, ModelLoadError, current
from queue_workflows.gpu.registry import (
    ModelSpec,
    UnknownModelError,
    ensure_builtin_models,
    get,
    register,
    registered,
    set_builtin_model_registrar,
)

__all__ = [
    "ModelCache",
    "ModelLoadError",
    "ModelSpec",
    "UnknownModelError",
    "current",
    "ensure_builtin_models",
    "get",
    "register",
    "registered",
    "set_builtin_model_registrar",
]
