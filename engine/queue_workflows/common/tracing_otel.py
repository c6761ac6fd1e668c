"""The spans of common/tracing.py, on OpenTelemetry: imported only once tracing is on (the `otel` extra)."""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Mapping, Sequence
from importlib.metadata import entry_points
from typing import Any

from opentelemetry import context as otel_context
from opentelemetry import trace
from opentelemetry.propagate import extract, inject
from opentelemetry.trace import Link, SpanKind, Status, StatusCode
from psycopg.types.json import Jsonb

log = logging.getLogger(__name__)

TRACER_NAME = "queue_workflows"
DEFAULT_SERVICE_NAME = "queue-workflows"
_OTLP_NAMES = {"otlp", "otlp_proto_http"}
_app: tuple[Any, Backend | None] | None = None  # (the application's provider, our backend on it)


def _exporters() -> list[Any]:
    """The span exporters OTEL_TRACES_EXPORTER names (default otlp: OTLP over HTTP), found as the SDK finds them."""
    names = [n.strip().lower() for n in os.environ.get("OTEL_TRACES_EXPORTER", "otlp").split(",") if n.strip()]
    found = {ep.name: ep for ep in entry_points(group="opentelemetry_traces_exporter")}
    exporters = []
    for name in names:
        if name == "none":
            continue
        key = "otlp_proto_http" if name in _OTLP_NAMES and "otlp_proto_http" in found else name
        if key not in found:
            log.warning("OTEL_TRACES_EXPORTER names %r, which no installed package provides (have: %s); it is left out",
                        name, ", ".join(sorted(found)) or "none")
            continue
        exporters.append(found[key].load()())
    return exporters


class Backend:
    def __init__(self, tracer: Any, provider: Any = None) -> None:
        self.tracer = tracer
        self.provider = provider  # ours, when we built it from the environment

    @classmethod
    def from_env(cls) -> Backend:
        """An SDK provider from the OTEL_* variables (resource, sampler, batch limits), unless the application installed one."""
        current = trace.get_tracer_provider()
        if _is_sdk(current):
            return cls(current.get_tracer(TRACER_NAME))
        from opentelemetry.sdk.resources import SERVICE_NAME, Resource
        from opentelemetry.sdk.trace import TracerProvider
        from opentelemetry.sdk.trace.export import BatchSpanProcessor

        resource = Resource.create()  # OTEL_SERVICE_NAME, OTEL_RESOURCE_ATTRIBUTES
        if str(resource.attributes.get(SERVICE_NAME, "")).startswith("unknown_service"):
            resource = resource.merge(Resource({SERVICE_NAME: DEFAULT_SERVICE_NAME}))
        provider = TracerProvider(resource=resource)  # OTEL_TRACES_SAMPLER too; flushed at exit
        for exporter in _exporters():
            provider.add_span_processor(BatchSpanProcessor(exporter))  # OTEL_BSP_* apply
        trace.set_tracer_provider(provider)  # the task's own spans nest under its run span
        return cls(provider.get_tracer(TRACER_NAME), provider)

    @classmethod
    def from_application(cls) -> Backend | None:
        """The application's own SDK provider, when it installed one; None while the global one is a no-op."""
        global _app
        current = trace.get_tracer_provider()
        if _app is None or _app[0] is not current:
            _app = (current, cls(current.get_tracer(TRACER_NAME)) if _is_sdk(current) else None)
        return _app[1]

    def flush(self, timeout_seconds: float) -> None:
        provider = self.provider or trace.get_tracer_provider()
        force = getattr(provider, "force_flush", None)
        if force is not None:
            force(int(timeout_seconds * 1000))

    def enqueue_span(self, family: str, queue: str, task: str | None, *, count: int, run_id: int | None) -> _Span:
        attributes: dict[str, Any] = {"messaging.system": "queue_workflows", "messaging.operation.type": "send",
                                      "messaging.destination.name": queue, "qw.family": family, "qw.queue": queue}
        if task is not None:
            attributes["qw.task"] = task
        if count != 1:
            attributes["messaging.batch.message_count"] = count
        if run_id is not None:
            attributes["qw.run.id"] = run_id
        return _Span(self.tracer.start_as_current_span("qw.enqueue", kind=SpanKind.PRODUCER, attributes=attributes), carry=True)

    def claim_span(self, job: Any, started_ns: int, worker_id: str, host: str) -> Any:
        span = self.tracer.start_span("qw.claim", context=_parent(job.trace_context), kind=SpanKind.CONSUMER,
                                      attributes={**job_attributes(job, worker_id, host), "messaging.operation.type": "receive"},
                                      start_time=started_ns)
        span.end(end_time=max(time.time_ns(), started_ns))
        return span

    def batch_claim_span(self, jobs: Sequence[Any], started_ns: int, worker_id: str, host: str) -> Any:
        contexts = (trace.get_current_span(_parent(job.trace_context)).get_span_context() for job in jobs)
        attributes = {"messaging.system": "queue_workflows", "messaging.operation.type": "receive", "qw.queue": jobs[0].queue,
                      "messaging.destination.name": jobs[0].queue, "messaging.batch.message_count": len(jobs),
                      "qw.job.ids": [job.id for job in jobs], "qw.worker.id": worker_id, "host.name": host}
        span = self.tracer.start_span("qw.claim", context=otel_context.Context(), kind=SpanKind.CONSUMER, attributes=attributes,
                                      links=[Link(ctx) for ctx in contexts if ctx.is_valid], start_time=started_ns)
        span.end(end_time=max(time.time_ns(), started_ns))
        return span

    def run_span(self, job: Any, worker_id: str, host: str, claim: Any, *, linked: bool) -> _Span:
        if claim is not None and not linked:
            parent, links = trace.set_span_in_context(claim, otel_context.Context()), None
        else:
            parent, links = _parent(job.trace_context), [Link(claim.get_span_context())] if claim is not None else None
        attributes = {**job_attributes(job, worker_id, host), "messaging.operation.type": "process"}
        return _Span(self.tracer.start_as_current_span("qw.run", context=parent, kind=SpanKind.CONSUMER, attributes=attributes,
                                                       links=links, record_exception=True))

    def model_load_span(self, model_id: str) -> _Span:
        return _Span(self.tracer.start_as_current_span("qw.model_load", attributes={"qw.model": model_id}))

    def current_trace_id(self) -> str | None:
        ctx = trace.get_current_span().get_span_context()
        return format(ctx.trace_id, "032x") if ctx.is_valid else None


def job_attributes(job: Any, worker_id: str, host: str) -> dict[str, Any]:
    """A claimed job's span attributes: which job, queue, task and attempt, on which worker and host."""
    task = getattr(job, "task_name", None) or getattr(job, "node_module", None) or getattr(job, "node_name", None)
    attributes: dict[str, Any] = {
        "messaging.system": "queue_workflows", "messaging.destination.name": job.queue, "messaging.message.id": str(job.id),
        "qw.job.id": job.id, "qw.family": "ingest" if hasattr(job, "task_name") else "node", "qw.queue": job.queue,
        "qw.task": task, "qw.attempt": job.attempts, "qw.worker.id": worker_id, "host.name": host, "qw.tenant": job.tenant,
    }
    if (run_id := getattr(job, "run_id", None)) is not None:
        attributes["qw.run.id"] = run_id
        attributes["qw.node"] = job.node_name
    if (model := getattr(job, "required_model", None)) is not None:
        attributes["qw.model"] = model
    return attributes


def _is_sdk(provider: Any) -> bool:
    return not isinstance(provider, trace.ProxyTracerProvider | trace.NoOpTracerProvider)


def _parent(carrier: Mapping[str, Any] | None) -> Any:
    """The stored context as a parent; an empty context (a new root) when there is none."""
    return extract(dict(carrier)) if carrier else otel_context.Context()


class _Span:
    """A started span, current inside `with`; `carrier` is its W3C context when it is to be stored."""

    def __init__(self, manager: Any, *, carry: bool = False) -> None:
        self._manager = manager
        self._carry = carry
        self.span: Any = None
        self.carrier: dict[str, str] | None = None
        self.column: Jsonb | None = None
        self.trace_id: str | None = None

    def __enter__(self) -> _Span:
        self.span = self._manager.__enter__()
        ctx = self.span.get_span_context()
        if ctx.is_valid:
            self.trace_id = format(ctx.trace_id, "032x")
            if self._carry:
                carrier: dict[str, str] = {}
                inject(carrier)
                self.carrier = {k: v for k, v in carrier.items() if k in ("traceparent", "tracestate")} or None
                self.column = Jsonb(self.carrier) if self.carrier else None
        return self

    def __exit__(self, *exc: Any) -> Any:
        return self._manager.__exit__(*exc)

    def job(self, row: Mapping[str, Any] | None) -> None:
        if row is not None and self.span.is_recording():
            self.span.set_attribute("qw.job.id", row["id"])
            self.span.set_attribute("messaging.message.id", str(row["id"]))

    def outcome(self, status: str, error: str | None = None, exception: tuple[str, ...] = ()) -> None:
        self.span.set_attribute("qw.job.outcome", status)
        if status != "failed":
            return
        lines = (error or "").strip().splitlines()
        kind = exception[0].replace(":", ".") if exception else "error"
        self.span.add_event("exception", {"exception.type": kind, "exception.message": lines[-1] if lines else "",
                                          "exception.stacktrace": error or ""})
        self.span.set_status(Status(StatusCode.ERROR, lines[-1] if lines else None))

    def loaded(self, hit: bool, load_seconds: float | None) -> None:
        self.span.set_attribute("qw.model.hit", hit)
        if load_seconds is not None:
            self.span.set_attribute("qw.model.load_seconds", load_seconds)

