"""Structured logs (QW_LOG_FORMAT=json): one JSON object per line, each naming the job it was logged under.

The worker sets the job's fields in a context variable around the job (`job_fields`); a handler
filter copies them onto every record, so a task's own `logging` calls carry them too, on the
worker's thread, a batch's pool threads and its event loop's tasks alike.
"""

from __future__ import annotations

import contextlib
import contextvars
import json
import logging
import traceback
from collections.abc import Iterator
from datetime import UTC, datetime
from typing import Any

JOB_FIELDS = ("job_id", "run_id", "queue", "host", "trace_id")
"""Keys every JSON line has (null outside a job; trace_id: the job's trace, null when it has none, docs/tracing.md)."""

_job: contextvars.ContextVar[dict[str, Any] | None] = contextvars.ContextVar("qw_log_job", default=None)
_STANDARD = frozenset(logging.makeLogRecord({}).__dict__) | {"message", "asctime", *JOB_FIELDS}


@contextlib.contextmanager
def job_fields(*, job_id: int, queue: str, host: str, run_id: int | None = None, trace_id: str | None = None) -> Iterator[None]:
    """Every record logged inside (in this thread or task) names this job."""
    token = _job.set({"job_id": job_id, "run_id": run_id, "queue": queue, "host": host, "trace_id": trace_id})
    try:
        yield
    finally:
        _job.reset(token)


def current_job() -> dict[str, Any] | None:
    return _job.get()


class JobFieldsFilter(logging.Filter):
    """Puts the current job's fields on each record (this process's host, and nulls, outside a job)."""

    def __init__(self, host: str | None = None) -> None:
        super().__init__()
        self.host = host

    def filter(self, record: logging.LogRecord) -> bool:
        fields = _job.get() or {"job_id": None, "run_id": None, "queue": None, "host": self.host, "trace_id": None}
        for key in JOB_FIELDS:
            setattr(record, key, fields[key])
        return True


class JsonFormatter(logging.Formatter):
    """One line of JSON: time (UTC, ISO), level, logger, process, message, the job's fields, any `extra=` keys, and the traceback."""

    def format(self, record: logging.LogRecord) -> str:
        out: dict[str, Any] = {
            "ts": datetime.fromtimestamp(record.created, UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z"),
            "level": record.levelname,
            "logger": record.name,
            "process": record.processName,
            "pid": record.process,
            "message": record.getMessage(),
        }
        out.update({key: getattr(record, key, None) for key in JOB_FIELDS})
        out.update({k: v for k, v in record.__dict__.items() if k not in _STANDARD and not k.startswith("_")})
        if record.exc_info:
            out["exc_info"] = "".join(traceback.format_exception(*record.exc_info)).rstrip()
        if record.stack_info:
            out["stack_info"] = record.stack_info
        return json.dumps(out, default=str, ensure_ascii=False)


def json_handler(stream: Any, *, host: str | None) -> logging.Handler:
    handler = logging.StreamHandler(stream)
    handler.setFormatter(JsonFormatter())
    handler.addFilter(JobFieldsFilter(host))
    return handler
