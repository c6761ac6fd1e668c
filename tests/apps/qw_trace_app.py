"""Tasks and a producer for the tracing tests (tests/worker/test_tracing_procs.py): `python -m qw_trace_app MODE` enqueues and prints the ids.

Modes: `request` sets up the application's own OpenTelemetry SDK (as a web app would) and enqueues
inside its "web.request" span, then once outside any span; `env` enqueues with only the OTEL_*
variables (the engine's own provider); `plain` enqueues with tracing off. Each prints one JSON line.
"""

from __future__ import annotations

import json
import logging
import os
import sys
from typing import Any

from queue_workflows import register_ingest_task

log = logging.getLogger("qw_trace_app")


def _otel_modules() -> list[str]:
    return sorted(m for m in sys.modules if m == "opentelemetry" or m.startswith("opentelemetry."))


def traced(reason: str, args: dict[str, Any]) -> dict[str, Any]:
    log.info("traced task runs %s", args.get("n"))
    return {"pid": os.getpid(), "otel_modules": _otel_modules()}


def traced_fail(reason: str, args: dict[str, Any]) -> dict[str, Any]:
    raise ValueError(f"traced failure {args.get('n')}")


register_ingest_task("traced", traced)
register_ingest_task("traced_fail", traced_fail)


def _enqueue_all() -> dict[str, Any]:
    import queue_workflows
    from queue_workflows import bulk, node_queue
    from queue_workflows.dag import Workflow

    wf = (Workflow("traced_dag").node("a", "qw_dag_nodes:work", inputs={"label": "a"})
          .node("b", "qw_dag_nodes:work", deps=["a"], inputs={"label": "b"}))
    return {
        "ok": node_queue.enqueue_ingest_job("traced", "fetch", {"n": 1}, max_attempts=1)["id"],
        "failing": node_queue.enqueue_ingest_job("traced_fail", "fetch", {"n": 2}, max_attempts=1)["id"],
        "bulk": [r["id"] for r in node_queue.enqueue_ingest_jobs([{"task_name": "traced", "queue": "load", "args": {"n": i}} for i in (3, 4)])],
        "copied": bulk.copy_ingest_jobs([{"task_name": "traced", "queue": "load", "args": {"n": 5}}]),
        "run": queue_workflows.start_run(wf, {}, check_callables=False),
        "gpu": node_queue.enqueue_node_job("qw_gpu_nodes", "gpu", node_module="qw_gpu_nodes", required_model="warm", check_callable=False)["id"],
    }


def main(mode: str) -> None:
    from queue_workflows import node_queue

    out: dict[str, Any] = {}
    if mode == "request":
        from opentelemetry import trace
        from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
        from opentelemetry.sdk.resources import Resource
        from opentelemetry.sdk.trace import TracerProvider
        from opentelemetry.sdk.trace.export import BatchSpanProcessor

        provider = TracerProvider(resource=Resource.create({"service.name": "web-app"}))
        provider.add_span_processor(BatchSpanProcessor(OTLPSpanExporter()))
        trace.set_tracer_provider(provider)
        with trace.get_tracer("web").start_as_current_span("web.request") as request:
            out = _enqueue_all()
            out["request_trace"] = format(request.get_span_context().trace_id, "032x")
        out["outside"] = node_queue.enqueue_ingest_job("traced", "fetch", {"n": 6}, max_attempts=1)["id"]
        provider.shutdown()
    elif mode == "env":
        out["outside"] = node_queue.enqueue_ingest_job("traced", "fetch", {"n": 7}, max_attempts=1)["id"]
    else:
        out["plain"] = node_queue.enqueue_ingest_job("traced", "fetch", {"n": 8}, max_attempts=1)["id"]
    out["otel_modules"] = _otel_modules()
    print(json.dumps(out), flush=True)


if __name__ == "__main__":
    main(sys.argv[1])
