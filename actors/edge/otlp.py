"""The OTLP/HTTP trace exporter of a box: every turn's record sent as a trace.

``TraceExporter`` observes the router's records in the router's process (one of its
``record_observers``: no bus hop, no decoding, which would cost more than the spans): each
``TurnRecord`` becomes the spans ``telemetry.turn_spans`` plans, built as OpenTelemetry SDK
spans with their recorded times and ids, each under the resource of the process that ran it
(``service.instance.id`` is its runtime name), and handed to a ``BatchSpanProcessor`` whose
thread sends them to the collector over OTLP/HTTP (protobuf). Observing only builds and
queues; the queue is the SDK's, bounded (``OTEL_BSP_MAX_QUEUE_SIZE``, 2048 spans: several
hundred turns), and the SDK logs what it drops. Stopping sends what is queued (within
``STOP_FLUSH_MS``).

This module imports OpenTelemetry (the ``otel`` extra) and is itself imported only by a
box whose config, or environment, names a collector (``telemetry.traces_endpoint``).
"""

from __future__ import annotations

import asyncio
import random

from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import Event, ReadableSpan
from opentelemetry.sdk.trace.export import BatchSpanProcessor, SpanExporter
from opentelemetry.sdk.util.instrumentation import InstrumentationScope
from opentelemetry.trace import SpanContext, SpanKind, TraceFlags
from opentelemetry.trace.status import Status, StatusCode

from xrmq.actors.runtime import Agent, get_logger
from xrmq.schemas import TurnRecord

from .telemetry import SpanPlan, parent_of, trace_id_of_turn, turn_spans

SCOPE = InstrumentationScope("xrmq.turns")
SERVICE = "xrmq"
STOP_FLUSH_MS = 2_000
"""How long stopping waits for the queued spans to go out (the process's shutdown is
bounded: a collector that does not answer loses them, with a warning)."""
MAX_RESOURCES = 256
"""Processes whose resource is kept; beyond, the table starts again (a box has a handful)."""
_KINDS = {
    "internal": SpanKind.INTERNAL,
    "server": SpanKind.SERVER,
    "client": SpanKind.CLIENT,
    "producer": SpanKind.PRODUCER,
}
_SAMPLED = TraceFlags(TraceFlags.SAMPLED)


class TraceExporter(Agent):
    """Sends each turn's record it observes (``observe``, one of the router's
    ``record_observers``) to ``endpoint`` (an OTLP/HTTP traces URL) as one trace;
    ``exporter`` replaces the OTLP one (a test's or a benchmark's). Registered as an actor
    for its lifecycle only (it subscribes to nothing): before the router, so it stops after
    the router's last turn and flushes then."""

    def __init__(self, endpoint: str, *, exporter: SpanExporter | None = None) -> None:
        self.endpoint = endpoint
        self._processor = BatchSpanProcessor(exporter or OTLPSpanExporter(endpoint=endpoint))
        self._resources: dict[str, Resource] = {}
        self._random = random.Random()

    def observe(self, record: TurnRecord) -> None:
        """Queue the spans of one turn (the SDK's thread sends them)."""
        for span in self.spans(record):
            self._processor.on_end(span)

    def flush(self, timeout_ms: int = 30_000) -> bool:
        """Send what is queued now (blocking); False if it did not go out in time."""
        return self._processor.force_flush(timeout_ms)

    async def on_stop(self) -> None:
        if not await asyncio.to_thread(self.flush, STOP_FLUSH_MS):
            get_logger(endpoint=self.endpoint).warning("telemetry.flush_timeout")

    def spans(self, record: TurnRecord) -> list[ReadableSpan]:
        """The SDK spans of one turn's record, the root first."""
        plans = turn_spans(record)
        remote = parent_of(record.traceparent)
        trace_id = remote[0] if remote else trace_id_of_turn(record.turn_id)
        contexts = [
            SpanContext(trace_id, self._random.getrandbits(64) or 1, False, _SAMPLED) for _ in plans
        ]
        root_parent = SpanContext(remote[0], remote[1], True, _SAMPLED) if remote else None
        return [
            self._span(
                plan,
                contexts[index],
                root_parent if plan.parent is None else contexts[plan.parent],
            )
            for index, plan in enumerate(plans)
        ]

    def _span(
        self, plan: SpanPlan, context: SpanContext, parent: SpanContext | None
    ) -> ReadableSpan:
        return ReadableSpan(
            plan.name,
            context=context,
            parent=parent,
            resource=self._resource(plan.runtime),
            attributes=plan.attributes,
            events=[Event(name, timestamp=at * 1000) for name, at in plan.events],
            kind=_KINDS[plan.kind],
            status=Status(StatusCode.ERROR, plan.error) if plan.error else Status(StatusCode.UNSET),
            start_time=plan.start_us * 1000,
            end_time=plan.end_us * 1000,
            instrumentation_scope=SCOPE,
        )

    def _resource(self, runtime: str) -> Resource:
        resource = self._resources.get(runtime)
        if resource is None:
            if len(self._resources) >= MAX_RESOURCES:
                self._resources.clear()
            resource = self._resources[runtime] = Resource.create(
                {"service.name": SERVICE, "service.instance.id": runtime}
            )
        return resource
