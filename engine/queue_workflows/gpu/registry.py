"""Models a gpu worker can load: `ModelSpec`s registered by the host, by id.

A host registers its models in code it controls (`register(spec)`), or hands the engine a
registrar (`set_builtin_model_registrar(fn)`) that a gpu worker calls once at start, so a model
list that imports heavy libraries is only read where it is needed.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from queue_workflows.errors import QueueWorkflowsError

Loader = Callable[[], Any]
Unloader = Callable[[Any], None]


class UnknownModelError(QueueWorkflowsError, LookupError):
    """A job names a model no registered spec provides."""


@dataclass(frozen=True)
class ModelSpec:
    """`loader()` returns the loaded model; `unloader(model)` frees it; `est_vram_gb` sizes its slot."""

    id: str
    loader: Loader
    unloader: Unloader | None = None
    est_vram_gb: float | None = None

    def __post_init__(self) -> None:
        if not isinstance(self.id, str) or not self.id or len(self.id) > 128:
            raise ValueError(f"a model id is a non-empty string of at most 128 characters, not {self.id!r}")
        if not callable(self.loader):
            raise TypeError(f"model {self.id!r}: loader must be callable")
        if self.unloader is not None and not callable(self.unloader):
            raise TypeError(f"model {self.id!r}: unloader must be callable or None")
        if self.est_vram_gb is not None and not (isinstance(self.est_vram_gb, (int, float)) and self.est_vram_gb >= 0):
            raise ValueError(f"model {self.id!r}: est_vram_gb must be a non-negative number, not {self.est_vram_gb!r}")


_lock = threading.Lock()
_specs: dict[str, ModelSpec] = {}
_registrar: Callable[[], None] | None = None
_registrar_ran = False


def register(spec: ModelSpec) -> ModelSpec:
    """Add or replace the spec for `spec.id`."""
    if not isinstance(spec, ModelSpec):
        raise TypeError(f"register() takes a ModelSpec, not {type(spec).__name__}")
    with _lock:
        _specs[spec.id] = spec
    return spec


def get(model_id: str) -> ModelSpec:
    with _lock:
        spec = _specs.get(model_id)
        known = sorted(_specs)
    if spec is None:
        raise UnknownModelError(f"model {model_id!r} is not registered (registered: {', '.join(known) or 'none'})")
    return spec


def registered() -> list[ModelSpec]:
    with _lock:
        return list(_specs.values())


def set_builtin_model_registrar(fn: Callable[[], None] | None) -> None:
    """`fn()` registers the built-in models; a gpu worker calls it once, at start."""
    global _registrar, _registrar_ran
    with _lock:
        _registrar, _registrar_ran = fn, False


def ensure_builtin_models() -> None:
    """Run the registrar once per process (idempotent: later calls do nothing)."""
    global _registrar_ran
    with _lock:
        fn, ran = _registrar, _registrar_ran
        _registrar_ran = True
    if fn is not None and not ran:
        fn()


def reset() -> None:
    """Forget every spec and the registrar (tests)."""
    global _registrar, _registrar_ran
    with _lock:
        _specs.clear()
        _registrar, _registrar_ran = None, False
