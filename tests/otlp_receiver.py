"""Test support: an OpenTelemetry collector on loopback speaking OTLP/HTTP (protobuf).

``OTLPReceiver`` serves ``POST /v1/traces`` on 127.0.0.1 from a thread, decodes each body as
an ``ExportTraceServiceRequest`` (``opentelemetry-proto``) and hands its spans to the test's
loop, each with the resource attributes of its process: ``spans`` and ``until``.
"""

from __future__ import annotations

import asyncio
import gzip
import threading
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)
from opentelemetry.proto.common.v1.common_pb2 import AnyValue


@dataclass
class ReceivedSpan:
    name: str
    trace_id: str
    span_id: str
    parent_span_id: str
    start_ns: int
    end_ns: int
    attributes: dict[str, Any]
    resource: dict[str, Any]
    events: list[str]
    links: list[tuple[str, str]]
    kind: int = 0
    status: tuple[int, str] = (0, "")


def value_of(value: AnyValue) -> Any:
    kind = value.WhichOneof("value")
    if kind == "array_value":
        return [value_of(item) for item in value.array_value.values]
    return getattr(value, kind) if kind else None


def spans_of(body: bytes) -> list[ReceivedSpan]:
    request = ExportTraceServiceRequest()
    request.ParseFromString(body)
    found = []
    for resource_spans in request.resource_spans:
        resource = {a.key: value_of(a.value) for a in resource_spans.resource.attributes}
        for scope_spans in resource_spans.scope_spans:
            for span in scope_spans.spans:
                found.append(
                    ReceivedSpan(
                        span.name,
                        span.trace_id.hex(),
                        span.span_id.hex(),
                        span.parent_span_id.hex(),
                        span.start_time_unix_nano,
                        span.end_time_unix_nano,
                        {a.key: value_of(a.value) for a in span.attributes},
                        resource,
                        [event.name for event in span.events],
                        [(link.trace_id.hex(), link.span_id.hex()) for link in span.links],
                        span.kind,
                        (span.status.code, span.status.message),
                    )
                )
    return found


class OTLPReceiver:
    """A loopback OTLP/HTTP trace collector; use as an (async-loop-bound) context manager."""

    def __init__(self) -> None:
        self.spans: list[ReceivedSpan] = []
        self.requests = 0
        self.headers: list[dict[str, str]] = []
        """Each request's headers, in order."""
        self._loop = asyncio.get_running_loop()
        self._changed = asyncio.Event()
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers["Content-Length"]))
                if self.headers.get("Content-Encoding") == "gzip":
                    body = gzip.decompress(body)
                spans = spans_of(body) if self.path == "/v1/traces" else []
                reply = ExportTraceServiceResponse().SerializeToString()
                self.send_response(200 if self.path == "/v1/traces" else 404)
                self.send_header("Content-Type", "application/x-protobuf")
                self.send_header("Content-Length", str(len(reply)))
                self.end_headers()
                self.wfile.write(reply)
                headers = dict(self.headers.items())
                receiver._loop.call_soon_threadsafe(receiver._add, spans, headers)

            def log_message(self, *args: object) -> None:
                pass

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.endpoint = f"http://127.0.0.1:{self._server.server_address[1]}"
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    def _add(self, spans: list[ReceivedSpan], headers: dict[str, str]) -> None:
        self.requests += 1
        self.headers.append(headers)
        self.spans += spans
        self._changed.set()

    async def until(self, done, timeout: float = 30) -> None:
        """Wait until ``done(spans)`` is true."""

        async def wait() -> None:
            while not done(self.spans):
                self._changed.clear()
                await self._changed.wait()

        await asyncio.wait_for(wait(), timeout)

    def __enter__(self) -> OTLPReceiver:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._server.shutdown()
        self._server.server_close()
