"""A tiny real OTLP/HTTP trace receiver: decodes each ExportTraceServiceRequest (protobuf) POSTed to /v1/traces."""

from __future__ import annotations

import gzip
import threading
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest, ExportTraceServiceResponse


@dataclass
class Span:
    name: str
    trace_id: str
    span_id: str
    parent_id: str | None
    kind: int
    service: str
    attributes: dict[str, Any]
    links: list[tuple[str, str]]  # (trace id, span id)
    status: int  # 0 unset, 1 ok, 2 error
    events: list[tuple[str, dict[str, Any]]] = field(default_factory=list)


def _value(v: Any) -> Any:
    which = v.WhichOneof("value")
    if which == "array_value":
        return [_value(x) for x in v.array_value.values]
    return getattr(v, which) if which else None


def _attributes(kvs: Any) -> dict[str, Any]:
    return {kv.key: _value(kv.value) for kv in kvs}


class OtlpReceiver:
    """`with OtlpReceiver() as r:` serves on 127.0.0.1 (or `host`); `r.endpoint` for OTEL_EXPORTER_OTLP_ENDPOINT; `r.spans` as they arrive."""

    def __init__(self, host: str = "127.0.0.1") -> None:
        self.spans: list[Span] = []
        self.requests = 0
        self._lock = threading.Lock()
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:  # noqa: N802 - http.server's name
                body = self.rfile.read(int(self.headers.get("Content-Length", 0)))
                if self.headers.get("Content-Encoding") == "gzip":
                    body = gzip.decompress(body)
                if self.path != "/v1/traces":
                    self.send_response(404)
                    self.end_headers()
                    return
                receiver._add(ExportTraceServiceRequest.FromString(body))
                reply = ExportTraceServiceResponse().SerializeToString()
                self.send_response(200)
                self.send_header("Content-Type", "application/x-protobuf")
                self.send_header("Content-Length", str(len(reply)))
                self.end_headers()
                self.wfile.write(reply)

            def log_message(self, *args: Any) -> None:
                pass

        self._server = ThreadingHTTPServer((host, 0), Handler)
        self.port = int(self._server.server_address[1])
        self.endpoint = f"http://127.0.0.1:{self.port}"
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    def _add(self, request: ExportTraceServiceRequest) -> None:
        found = []
        for resource_spans in request.resource_spans:
            service = str(_attributes(resource_spans.resource.attributes).get("service.name"))
            for scope_spans in resource_spans.scope_spans:
                for s in scope_spans.spans:
                    found.append(Span(
                        name=s.name, trace_id=s.trace_id.hex(), span_id=s.span_id.hex(), parent_id=s.parent_span_id.hex() or None,
                        kind=s.kind, service=service, attributes=_attributes(s.attributes),
                        links=[(link.trace_id.hex(), link.span_id.hex()) for link in s.links], status=s.status.code,
                        events=[(e.name, _attributes(e.attributes)) for e in s.events],
                    ))
        with self._lock:
            self.requests += 1
            self.spans.extend(found)

    def named(self, name: str, **attributes: Any) -> list[Span]:
        with self._lock:
            return [s for s in self.spans if s.name == name and all(s.attributes.get(k) == v for k, v in attributes.items())]

    def __enter__(self) -> OtlpReceiver:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._server.shutdown()
        self._server.server_close()
