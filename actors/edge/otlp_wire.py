"""OTLP trace requests encoded by hand: the protobuf of ``ExportTraceServiceRequest``.

``encode_request(turns)`` writes the bytes an OTLP/HTTP collector takes at ``/v1/traces``
(``Content-Type: application/x-protobuf``) for the spans of some turns
(``telemetry.SpanPlan``, with their trace and span ids), grouped by the process that ran
them (one ``ResourceSpans`` each, ``service.name`` ``xrmq`` and ``service.instance.id``
the runtime's name) under the instrumentation scope ``xrmq.turns``.

Why by hand: the OpenTelemetry SDK builds a ``ReadableSpan`` per span, queues it, then
builds the generated protobuf classes' objects from it and serializes them, which cost
the router several times what the turn's record does (``bench telemetry``). A turn's spans
have a handful of fixed shapes, and the protobuf wire format is small (varints, fixed64
times and length-prefixed fields), so writing the bytes directly is a few bytes
operations a field. The field numbers are those of ``opentelemetry/proto/trace/v1/
trace.proto``, ``common.proto`` and ``resource.proto``; tests decode the result with
``opentelemetry-proto``. Pure: no I/O, no OpenTelemetry import.
"""

from __future__ import annotations

import struct
from collections.abc import Iterable
from typing import Any

from .telemetry import SpanPlan

SCOPE = "xrmq.turns"
SERVICE = "xrmq"
KINDS = {"internal": 1, "server": 2, "client": 3, "producer": 4, "consumer": 5}
"""``Span.SpanKind``."""
STATUS_ERROR = 2
"""``Status.StatusCode.STATUS_CODE_ERROR``."""

_FIXED64 = struct.Struct("<Q")
_DOUBLE = struct.Struct("<d")


def _varint(value: int) -> bytes:
    if value < 0:
        value += 1 << 64
    out = bytearray()
    while value > 0x7F:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


def _field(number: int, payload: bytes) -> bytes:
    """A length-delimited field (wire type 2): a message, a string or bytes."""
    return _varint(number << 3 | 2) + _varint(len(payload)) + payload


def _fixed64(number: int, value: int) -> bytes:
    return _varint(number << 3 | 1) + _FIXED64.pack(value)


def _string(number: int, text: str) -> bytes:
    return _field(number, text.encode())


def _any_value(value: Any) -> bytes:
    """``AnyValue``: string 1, bool 2, int 3, double 4."""
    if isinstance(value, bool):
        return b"\x10" + (b"\x01" if value else b"\x00")
    if isinstance(value, int):
        return b"\x18" + _varint(value)
    if isinstance(value, float):
        return b"\x21" + _DOUBLE.pack(value)
    return _string(1, str(value))


def _attributes(number: int, attributes: dict[str, Any]) -> bytes:
    """Repeated ``KeyValue`` (key 1, value 2) as field ``number``."""
    return b"".join(
        _field(number, _string(1, key) + _field(2, _any_value(value)))
        for key, value in attributes.items()
    )


def encode_span(plan: SpanPlan, trace_id: bytes, span_id: bytes, parent_id: bytes | None) -> bytes:
    """One ``Span``: ids (16, 8 and 8 bytes), name, kind, times, attributes, events, status."""
    out = [
        _field(1, trace_id),
        _field(2, span_id),
        _field(4, parent_id) if parent_id else b"",
        _string(5, plan.name),
        b"\x30" + _varint(KINDS[plan.kind]),
        _fixed64(7, plan.start_us * 1000),
        _fixed64(8, plan.end_us * 1000),
        _attributes(9, plan.attributes),
    ]
    for name, at_us in plan.events:
        out.append(_field(11, _fixed64(1, at_us * 1000) + _string(2, name)))
    if plan.error is not None:
        out.append(_field(15, _string(2, plan.error) + b"\x18" + _varint(STATUS_ERROR)))
    return b"".join(out)


def _resource(runtime: str) -> bytes:
    return _attributes(1, {"service.name": SERVICE, "service.instance.id": runtime})


_SCOPE = _field(1, _string(1, SCOPE))


def encode_request(spans: Iterable[tuple[str, bytes]]) -> bytes:
    """An ``ExportTraceServiceRequest`` of encoded spans, each with the runtime (process)
    that ran it: one ``ResourceSpans`` per runtime, in the order they first appear."""
    by_runtime: dict[str, list[bytes]] = {}
    for runtime, span in spans:
        by_runtime.setdefault(runtime, []).append(span)
    return b"".join(
        _field(
            1,
            _field(1, _resource(runtime))
            + _field(2, _SCOPE + b"".join(_field(2, span) for span in encoded)),
        )
        for runtime, encoded in by_runtime.items()
    )
