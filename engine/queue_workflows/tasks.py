"""The ingest task registry: `register_ingest_task(name, fn)`."""

from __future__ import annotations

import inspect
import re
import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from queue_workflows.errors import InvalidNameError, UnknownTaskError
from queue_workflows.payloads import shown

TASK_NAME_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_.:-]{0,127}$")

IngestFn = Callable[..., dict[str, Any] | None]


@dataclass(frozen=True)
class IngestTask:
    name: str
    fn: IngestFn
    takes_args: bool

    def __call__(self, reason: str, args: dict[str, Any]) -> dict[str, Any] | None:
        return self.fn(reason, args) if self.takes_args else self.fn(reason)


_lock = threading.Lock()
_tasks: dict[str, IngestTask] = {}


def check_task_name(name: object) -> str:
    if not isinstance(name, str) or not TASK_NAME_RE.match(name):
        raise InvalidNameError(
            f"task name {shown(name)} is invalid: use letters, digits and _ . : - (max 128), starting with a letter or _"
        )
    return name


def register_ingest_task(name: str, fn: IngestFn) -> IngestTask:
    """Register `fn(reason)` or `fn(reason, args)`; it returns a JSON-able dict (the stored result)."""
    check_task_name(name)
    if not callable(fn):
        raise TypeError(f"register_ingest_task({name!r}): {fn!r} is not callable")
    task = IngestTask(name, fn, _positional_arity(fn) >= 2)
    with _lock:
        _tasks[name] = task
    return task


def get_ingest_task(name: str) -> IngestTask:
    with _lock:
        task = _tasks.get(name)
        known = sorted(_tasks)
    if task is None:
        raise UnknownTaskError(
            f"ingest task {name!r} is not registered (registered: {', '.join(known) or 'none'})"
        )
    return task


def registered_task_names() -> frozenset[str]:
    with _lock:
        return frozenset(_tasks)


def clear_ingest_tasks() -> None:
    with _lock:
        _tasks.clear()


def _positional_arity(fn: IngestFn) -> int:
    try:
        params = inspect.signature(fn).parameters.values()
    except (TypeError, ValueError):
        return 2
    if any(p.kind is p.VAR_POSITIONAL for p in params):
        return 2
    positional = [p for p in params if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
    if not 1 <= len(positional) <= 2:
        raise TypeError(f"an ingest task takes (reason) or (reason, args); {fn!r} takes {len(positional)} positional parameters")
    return len(positional)
