"""The seed's public face for models: `ModelSpec`, `register`, `set_builtin_model_registrar`, and
`current()`, the model loaded for the gpu job running now (None outside one)."""

from __future__ import annotations

from .gpu.cache import ModelCache, ModelLoadError, current
from .gpu.registry import ModelSpec, UnknownModelError, ensure_builtin_models, get, register, registered, set_builtin_model_registrar

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
