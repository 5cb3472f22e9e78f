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
_SMALL = [bytes((value,)) for value in range(128)]
CACHE_LIMIT = 4096
"""Encoded attributes and resources kept for reuse (a turn's keys and most of its values
repeat from turn to turn); beyond, the cache starts again."""
_cache: dict[Any, bytes] = {}


def _varint(value: int) -> bytes:
    if 0 <= value < 128:
        return _SMALL[value]
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
    return _SMALL[number << 3 | 2] + _varint(len(payload)) + payload


def _fixed64(number: int, value: int) -> bytes:
    return _SMALL[number << 3 | 1] + _FIXED64.pack(value)


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


def _remember(key: Any, encoded: bytes) -> bytes:
    if len(_cache) >= CACHE_LIMIT:
        _cache.clear()
    _cache[key] = encoded
    return encoded


def _attribute(number: int, key: str, value: Any) -> bytes:
    """One ``KeyValue`` (key 1, value 2) as field ``number``; a string or bool value's bytes
    are reused."""
    if not isinstance(value, str | bool):
        return _field(number, _string(1, key) + _field(2, _any_value(value)))
    cache_key = (number, key, value)
    found = _cache.get(cache_key)
    if found is None:
        found = _remember(cache_key, _field(number, _string(1, key) + _field(2, _any_value(value))))
    return found


def _attributes(number: int, attributes: dict[str, Any]) -> bytes:
    """Repeated ``KeyValue`` as field ``number``."""
    return b"".join(_attribute(number, key, value) for key, value in attributes.items())


def _name(name: str, kind: str) -> bytes:
    """A span's name (5) and kind (6)."""
    found = _cache.get((name, kind))
    if found is None:
        found = _remember((name, kind), _string(5, name) + b"\x30" + _varint(KINDS[kind]))
    return found


def _event(name: str, at_us: int) -> bytes:
    """An ``Event`` (time 1, name 2) as field 11 of its span."""
    found = _cache.get(name)
    if found is None:
        found = _remember(name, _string(2, name))
    return _field(11, _fixed64(1, at_us * 1000) + found)


def encode_span(plan: SpanPlan, trace_id: bytes, span_id: bytes, parent_id: bytes | None) -> bytes:
    """One ``Span``: its ids (``trace_id`` 16 bytes, ``span_id`` and ``parent_id`` 8), name,
    kind, times, attributes, events and, when it failed, status."""
    out = [
        b"\x0a\x10" + trace_id,
        b"\x12\x08" + span_id,
        b"\x22\x08" + parent_id if parent_id else b"",
        _name(plan.name, plan.kind),
        _fixed64(7, plan.start_us * 1000),
        _fixed64(8, plan.end_us * 1000),
        _attributes(9, plan.attributes),
    ]
    out.extend(_event(name, at_us) for name, at_us in plan.events)
    if plan.error is not None:
        out.append(_field(15, _string(2, plan.error) + b"\x18" + _varint(STATUS_ERROR)))
    return b"".join(out)


def _resource(runtime: str) -> bytes:
    """A ``Resource`` as field 1 of its ``ResourceSpans``."""
    key = ("resource", runtime)
    found = _cache.get(key)
    if found is None:
        attributes = {"service.name": SERVICE, "service.instance.id": runtime}
        found = _remember(key, _field(1, _attributes(1, attributes)))
    return found


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
            _resource(runtime) + _field(2, _SCOPE + b"".join(_field(2, span) for span in encoded)),
        )
        for runtime, encoded in by_runtime.items()
    )
