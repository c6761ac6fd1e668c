"""Run one claimed job's code and say how it ended; no database access here."""

from __future__ import annotations

import importlib
import logging
import traceback
from dataclasses import dataclass
from typing import Any, Literal

from . import config, tasks
from .errors import InvalidPayloadError, QueueWorkflowsError
from .payloads import json_object

log = logging.getLogger(__name__)

_MAX_ERROR_CHARS = 4000


@dataclass(frozen=True)
class Outcome:
    status: Literal["completed", "failed"]
    result: Any = None
    error: str | None = None


def _failure(exc: BaseException) -> Outcome:
    if isinstance(exc, QueueWorkflowsError):
        text = f"{type(exc).__name__}: {exc}"
    else:
        text = "".join(traceback.format_exception(exc)).strip()
    return Outcome("failed", error=text[-_MAX_ERROR_CHARS:])


def _checked_result(value: Any, what: str) -> Any:
    if value is not None and not isinstance(value, dict):
        raise InvalidPayloadError(f"{what} must return a dict (or None), not {type(value).__name__}")
    return json_object(value, what=f"{what} result", max_bytes=config.current().settings.max_payload_bytes, allow_none=True)


def run_ingest_job(job: dict[str, Any]) -> Outcome:
    try:
        task = tasks.get_ingest_task(job["task_name"])
        value = task(job["reason"], dict(job["args"] or {}))
        return Outcome("completed", result=_checked_result(value, f"task {task.name!r}"))
    except Exception as exc:  # noqa: BLE001 - any task failure becomes the job's error
        return _failure(exc)


def run_node_job(job: dict[str, Any]) -> Outcome:
    """Import the node's module and call `run(inputs)`; its dict return is the context delta."""
    try:
        module_name = job["node_module"] or job["node_name"]
        module = importlib.import_module(module_name)
        run = getattr(module, "run", None)
        if not callable(run):
            raise InvalidPayloadError(f"node module {module_name!r} has no callable run(inputs)")
        value = run(dict(job["inputs"] or {}))
        return Outcome("completed", result=_checked_result(value, f"node {job['node_name']!r}"))
    except Exception as exc:  # noqa: BLE001
        return _failure(exc)
