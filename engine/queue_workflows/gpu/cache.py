"""The gpu worker's warm-model cache: models stay loaded between jobs, within a VRAM budget.

A job for a loaded model runs with no load (a hit); a miss loads it, first evicting the least
recently used models until it fits. A budget in GB counts each model's `est_vram_gb` (unknown
counts as the whole budget); without one the cache holds `slots` models (default one).
Eviction calls the model's unloader, then frees what Python and the allocator still hold. An
idle model is unloaded after `idle_seconds`; the decision runs on an injectable clock.
"""

from __future__ import annotations

import ctypes
import gc
import logging
import sys
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass
from typing import Any

from queue_workflows.gpu import registry

log = logging.getLogger(__name__)


_current: ContextVar[Any] = ContextVar("qw_current_model", default=None)


def current() -> Any:
    """The model loaded for the gpu job running now; None outside one (or for a job that names no model)."""
    return _current.get()


@contextmanager
def using(model: Any) -> Iterator[None]:
    token = _current.set(model)
    try:
        yield
    finally:
        _current.reset(token)


class ModelLoadError(RuntimeError):
    """The model's loader raised: the slot is left empty and the job fails (and retries) like any error."""


@dataclass
class Slot:
    spec: registry.ModelSpec
    model: Any
    last_used: float


@dataclass(frozen=True)
class Acquired:
    model: Any
    hit: bool
    load_seconds: float


def release_memory() -> None:
    """After an unload: collect garbage, empty torch's CUDA cache when torch is in use, trim the C heap."""
    gc.collect()
    torch = sys.modules.get("torch")
    if torch is not None:
        try:
            if torch.cuda.is_available():
                torch.cuda.empty_cache()
        except Exception as exc:  # noqa: BLE001 - best effort
            log.debug("torch.cuda.empty_cache failed: %s", exc)
    try:
        ctypes.CDLL("libc.so.6").malloc_trim(0)
    except (OSError, AttributeError):
        pass


class ModelCache:
    def __init__(
        self,
        *,
        slots: int = 1,
        budget_gb: float | None = None,
        idle_seconds: float | None = None,
        now_fn: Callable[[], float] = time.monotonic,
        release_fn: Callable[[], None] = release_memory,
    ) -> None:
        if slots < 1:
            raise ValueError(f"a model cache needs at least one slot, not {slots}")
        self.slots = slots
        self.budget_gb = budget_gb
        self.idle_seconds = idle_seconds
        self.now_fn = now_fn
        self.release_fn = release_fn
        self._loaded: OrderedDict[str, Slot] = OrderedDict()  # least recently used first
        self._lock = threading.Lock()
        self.swapping = False

    def loaded(self) -> list[str]:
        """Model ids held now, most recently used first (none while swapping)."""
        with self._lock:
            return [] if self.swapping else list(reversed(self._loaded))

    def most_recent(self) -> str | None:
        with self._lock:
            return next(reversed(self._loaded), None)

    def acquire(self, model_id: str) -> Acquired:
        """The loaded model for `model_id`, loading it (and evicting others) on a miss."""
        with self._lock:
            slot = self._loaded.get(model_id)
            if slot is not None:
                slot.last_used = self.now_fn()
                self._loaded.move_to_end(model_id)
                return Acquired(slot.model, True, 0.0)
        spec = registry.get(model_id)
        self.swapping = True
        try:
            self._make_room(spec)
            started = time.monotonic()
            try:
                model = spec.loader()
            except Exception as exc:
                raise ModelLoadError(f"model {model_id!r} failed to load: {type(exc).__name__}: {exc}") from exc
            took = time.monotonic() - started
            with self._lock:
                self._loaded[model_id] = Slot(spec, model, self.now_fn())
            log.info("model %s loaded in %.2fs", model_id, took)
            return Acquired(model, False, took)
        finally:
            self.swapping = False

    def _size(self, spec: registry.ModelSpec) -> float:
        if self.budget_gb is None:
            return 1.0
        return spec.est_vram_gb if spec.est_vram_gb is not None else self.budget_gb

    def _fits(self, spec: registry.ModelSpec) -> bool:
        if self.budget_gb is None:
            return len(self._loaded) < self.slots
        return sum(self._size(s.spec) for s in self._loaded.values()) + self._size(spec) <= self.budget_gb + 1e-9

    def _make_room(self, spec: registry.ModelSpec) -> None:
        while self._loaded and not self._fits(spec):
            self.unload(next(iter(self._loaded)), why="least recently used")

    def unload(self, model_id: str, *, why: str) -> bool:
        with self._lock:
            slot = self._loaded.pop(model_id, None)
        if slot is None:
            return False
        try:
            if slot.spec.unloader is not None:
                slot.spec.unloader(slot.model)
        except Exception:  # noqa: BLE001 - the slot is gone either way
            log.exception("model %s: its unloader raised", model_id)
        del slot
        self.release_fn()
        log.info("model %s unloaded (%s)", model_id, why)
        return True

    def idle_models(self) -> list[str]:
        """Models unused for `idle_seconds` (the decision alone, on the cache's clock)."""
        if self.idle_seconds is None:
            return []
        now = self.now_fn()
        with self._lock:
            return [m for m, s in self._loaded.items() if now - s.last_used >= self.idle_seconds]

    def unload_idle(self) -> list[str]:
        return [m for m in self.idle_models() if self.unload(m, why=f"idle for {self.idle_seconds:g}s")]

    def clear(self) -> None:
        for model_id in list(self._loaded):
            self.unload(model_id, why="worker stopping")
