"""OpenTelemetry traces from enqueue to task (docs/tracing.md): a no-op, importing nothing, unless OTEL_* configures tracing.

Tracing is on when the standard variables ask for an exporter (OTEL_EXPORTER_OTLP_ENDPOINT,
OTEL_EXPORTER_OTLP_TRACES_ENDPOINT, or OTEL_TRACES_EXPORTER other than `none`), OTEL_SDK_DISABLED
is not true and the SDK is importable (the `otel` extra); or when the application's own code has
already installed an OpenTelemetry SDK tracer provider. Otherwise every hook below returns a
shared no-op and `opentelemetry` is never imported. The spans themselves live in
`common/tracing_otel.py`, imported only once tracing is on.
"""

from __future__ import annotations

import importlib.util
import os
import sys
import threading
import time
from collections.abc import Mapping, Sequence
from typing import Any

ENDPOINT_VARS = ("OTEL_EXPORTER_OTLP_ENDPOINT", "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT")

_backend: Any = None  # tracing_otel.Backend once on
_env_on: bool | None = None  # what the environment says, read once per process
_init_lock = threading.Lock()


def env_configured(env: Mapping[str, str] | None = None) -> bool:
    """Do the OTEL_* variables ask for traces (and not turn the SDK off)?"""
    env = os.environ if env is None else env
    if env.get("OTEL_SDK_DISABLED", "").strip().lower() == "true":
        return False
    exporter = env.get("OTEL_TRACES_EXPORTER", "").strip().lower()
    if exporter == "none":
        return False
    return bool(exporter) or any(env.get(name, "").strip() for name in ENDPOINT_VARS)


def _active() -> Any:
    """The backend when tracing is on, else None; costs a dict lookup when off."""
    global _backend, _env_on
    if _backend is not None:
        return _backend
    if _env_on is None:
        with _init_lock:  # one provider per process, whichever thread enqueues first
            if _env_on is None and env_configured() and importlib.util.find_spec("opentelemetry.sdk") is not None:
                from queue_workflows.common import tracing_otel

                _backend = tracing_otel.Backend.from_env()
            _env_on = _backend is not None
        if _backend is not None:
            return _backend
    if "opentelemetry.trace" not in sys.modules:
        return None
    from queue_workflows.common import tracing_otel  # the application imported OpenTelemetry itself

    return tracing_otel.Backend.from_application()


def enabled() -> bool:
    return _active() is not None


class _NoSpan:
    """What every hook hands back while tracing is off: enters, records and carries nothing."""

    carrier = None  # the W3C context a traced enqueue stores, as a dict ...
    column = None  # ... and as the trace_context column's value
    trace_id: str | None = None

    def __enter__(self) -> _NoSpan:
        return self

    def __exit__(self, *exc: object) -> None:
        return None

    def job(self, row: Mapping[str, Any] | None) -> None:
        """The enqueued row (its id becomes an attribute)."""

    def outcome(self, status: str, error: str | None = None, exception: tuple[str, ...] = ()) -> None:
        """How the job's run ended (a failure records its exception and an error status)."""

    def loaded(self, hit: bool, load_seconds: float | None) -> None:
        """How a model load went."""


NO_SPAN = _NoSpan()


def enqueue_span(family: str, queue: str, task: str | None, *, count: int = 1, run_id: int | None = None) -> Any:
    """Around an enqueue ("qw.enqueue"): a PRODUCER span, child of the caller's active span (else a root),
    whose W3C context (`.carrier`, a dict for the row's trace_context column) the worker continues."""
    backend = _active()
    return NO_SPAN if backend is None else backend.enqueue_span(family, queue, task, count=count, run_id=run_id)


def clock() -> int:
    """Now, in ns since the epoch, for a span recorded after the fact (a claim's send)."""
    return time.time_ns()


def claim_span(job: Any, started_ns: int, worker_id: str, host: str) -> Any:
    """The claim of one job (`Job`), sent at `started_ns` and back now, as a child of the job's
    stored context: the token its run span nests under (None while off)."""
    backend = _active()
    return None if backend is None else backend.claim_span(job, started_ns, worker_id, host)


def batch_claim_span(jobs: Sequence[Any], started_ns: int, worker_id: str, host: str) -> Any:
    """The claim of a batch, sent at `started_ns`: a span of the worker's own trace, linked to each job's stored context."""
    backend = _active()
    return None if backend is None else backend.batch_claim_span(jobs, started_ns, worker_id, host)


def run_span(job: Any, worker_id: str, host: str, claim: Any = None, *, linked: bool = False) -> Any:
    """Around a job's run, current while its code runs: a child of its claim span (`claim`), or with
    `linked` (a batch) a child of its stored context, linked to the claim span. A failure recorded
    through `.outcome(...)` sets an error status and an exception event."""
    backend = _active()
    return NO_SPAN if backend is None else backend.run_span(job, worker_id, host, claim, linked=linked)


def model_load_span(model_id: str) -> Any:
    """Around a gpu job's model acquisition: `.loaded(hit, seconds)` says how it went; a loader's exception is recorded."""
    backend = _active()
    return NO_SPAN if backend is None else backend.model_load_span(model_id)


def current_trace_id() -> str | None:
    """The active span's trace id while tracing is on (None while off, or outside a span)."""
    backend = _active()
    return None if backend is None else backend.current_trace_id()


def job_trace_id(job: Any) -> str | None:
    """What a job's log records name as their trace: the span running now, else the job's stored context."""
    return current_trace_id() or trace_id_of(getattr(job, "trace_context", None))


def trace_id_of(carrier: Mapping[str, Any] | None) -> str | None:
    """The trace id (32 hex digits) a stored context names, read without OpenTelemetry; None if none or malformed."""
    if not carrier:
        return None
    parent = carrier.get("traceparent")
    if not isinstance(parent, str) or len(parent) < 55 or parent[2] != "-" or parent[35] != "-":
        return None
    trace_id = parent[3:35]
    return None if trace_id == "0" * 32 else trace_id


def flush(timeout_seconds: float = 2.0) -> None:
    """Export what is buffered now (before a hard exit, which skips the exporter's own at-exit flush); never raises."""
    if _backend is not None:
        try:
            _backend.flush(timeout_seconds)
        except Exception:  # noqa: BLE001 - a process on its way out must leave whatever the exporter does
            pass
