"""A turn as a trace: the spans of one ``TurnRecord``, planned without OpenTelemetry.

``turn_spans(record)`` plans the spans the OTLP exporter (``otlp.py``) sends for one turn:
a root ``xrmq.turn`` span, from the turn's first stage to its end, with the router's own
stages (received, routed, admitted) as its events, and under it one span per part of the
way the turn went (speech, transcription, the query's delivery, the model call, each tool
call, each compaction the turn caused, the reply's playback in a voice renderer), each
attributed to the process whose clock took its times (the record's ``client``,
``router``, ``destination`` and ``renderer``), so a trace viewer shows which process
spent the time. The
model span follows the OpenTelemetry GenAI semantic conventions (``gen_ai.operation.name``,
``gen_ai.request.model``, ``gen_ai.usage.*``), its first token and first chunk are events
on it, and a tool call is an ``execute_tool`` span of its own. A stage the turn did not
pass through makes no span.

The trace is the query's when its publisher sent a W3C ``traceparent`` (the root span is
then a child of the publisher's span, so a client in any language that traces its turns
finds ours under them); otherwise its id is derived from the turn id
(``trace_id_of_turn``), so every process, and a later look-up, names the same trace.

Why from the record, in the app: the record already carries every stage, measured in the
process that passed it and brought to the router with the result the router awaits, so
the trace costs the turn path nothing beyond the record (no clock read, no message, no
OpenTelemetry call in the router, the conversation or a client); the kernel only carries
the ``traceparent`` in the metadata; and the exporter, with its optional dependency, is
loaded only in a box whose config asks for it.
"""

from __future__ import annotations

import hashlib
import os
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import unquote

from xrmq.schemas import TurnRecord

TRACES_PATH = "/v1/traces"
ENDPOINT_ENV = "OTEL_EXPORTER_OTLP_ENDPOINT"
"""The standard base URL of an OTLP/HTTP collector (``TRACES_PATH`` is appended)."""
TRACES_ENDPOINT_ENV = "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"
"""The standard URL for traces alone (used as it is)."""


def traces_endpoint(otlp_endpoint: str | None, env: dict[str, str] | None = None) -> str | None:
    """Where traces go: ``otlp_endpoint`` (the box config's, a base URL like the standard
    variable's), else ``$OTEL_EXPORTER_OTLP_TRACES_ENDPOINT``, else
    ``$OTEL_EXPORTER_OTLP_ENDPOINT``; None: export nothing."""
    environ = os.environ if env is None else env
    if otlp_endpoint:
        return otlp_endpoint.rstrip("/") + TRACES_PATH
    if environ.get(TRACES_ENDPOINT_ENV):
        return environ[TRACES_ENDPOINT_ENV]
    base = environ.get(ENDPOINT_ENV)
    return base.rstrip("/") + TRACES_PATH if base else None


HEADERS_ENV = ("OTEL_EXPORTER_OTLP_TRACES_HEADERS", "OTEL_EXPORTER_OTLP_HEADERS")
"""The standard request headers for the collector (an API key, a tenant), traces' first."""


def otlp_headers(env: dict[str, str] | None = None) -> dict[str, str]:
    """The collector's request headers from the standard variables: ``key=value`` pairs
    separated by commas, values percent-encoded (``api-key=a%20b,tenant=lab``), as the
    OpenTelemetry specification writes them. A pair without ``=`` is refused naming the
    variable (a key that silently goes missing would fail every export as unauthorized)."""
    environ = os.environ if env is None else env
    for name in HEADERS_ENV:
        text = environ.get(name, "").strip()
        if not text:
            continue
        headers: dict[str, str] = {}
        for pair in text.split(","):
            key, sep, value = pair.partition("=")
            if not sep or not key.strip():
                raise ValueError(f"{name}: each header must be key=value, got {pair.strip()!r}")
            headers[key.strip()] = unquote(value.strip())
        return headers
    return {}


ROOT_EVENTS = ("received", "routed", "admitted")
"""The router's own stages: events on the root span (``xrmq.<stage>``), not spans, since
each is a few microseconds after the last and a span costs the exporter ten times an
event."""


@dataclass(frozen=True, slots=True)
class SpanPlan:
    """One span to export: its name, the runtime (process) it ran in, its times (Unix
    microseconds), its kind (``internal``, ``client`` or ``producer``), its attributes, its
    parent (an index into the turn's plans; None: the turn's remote parent, if any), its
    events (name, Unix microseconds) and, when it failed, the error."""

    name: str
    runtime: str
    start_us: int
    end_us: int
    kind: str = "internal"
    attributes: dict[str, Any] = field(default_factory=dict)
    parent: int | None = 0
    events: tuple[tuple[str, int], ...] = ()
    error: str | None = None


def trace_id_of_turn(turn_id: str) -> int:
    """A turn's trace id when its query carried no trace context: 128 bits of its id's hash."""
    return int.from_bytes(hashlib.blake2b(turn_id.encode(), digest_size=16).digest(), "big")


def parent_of(traceparent: str | None) -> tuple[int, int] | None:
    """The (trace id, span id) a W3C ``traceparent`` names; None for none or an invalid one
    (all-zero ids)."""
    if traceparent is None:
        return None
    parts = traceparent.split("-")
    trace_id, span_id = int(parts[1], 16), int(parts[2], 16)
    return (trace_id, span_id) if trace_id and span_id else None


def provider_of(model: str) -> str:
    """The GenAI provider of a model spec: litellm's prefix (``openai/gpt-4o`` -> openai)."""
    return model.split("/", 1)[0] if "/" in model else model


def turn_spans(record: TurnRecord) -> list[SpanPlan]:
    """The spans of one turn, the root first (see the module docstring); none for a turn
    with no end time. The root lasts from the turn's first stage to its last (playback may
    outlast the router's end of the turn)."""
    stages = record.stages()
    if "ended" not in stages:
        return []
    router = record.router or "router"
    client = record.client or router
    destination = record.destination or router
    start = min(stages.values())
    root = SpanPlan(
        "xrmq.turn",
        router,
        start,
        max(stages.values()),
        kind="server",
        attributes=_present(
            {
                "xrmq.turn.id": record.turn_id,
                "xrmq.participant.id": record.participant_id,
                "xrmq.turn.status": record.status,
                "xrmq.turn.route": record.route,
            }
        ),
        parent=None,
        events=tuple((f"xrmq.{stage}", stages[stage]) for stage in ROOT_EVENTS if stage in stages),
        error=record.error if record.status == "failed" else None,
    )
    spans = [root]
    for name, runtime, first, last, kind in (
        ("xrmq.speech", client, "speech_start", "speech_end", "internal"),
        ("xrmq.transcribe", client, "speech_end", "transcribed", "internal"),
        ("voice.query publish", client, "query", "received", "producer"),
    ):
        if first in stages and last in stages:
            attributes = (
                {"messaging.system": "xrmq", "messaging.destination.name": "voice.query"}
                if kind == "producer"
                else {}
            )
            spans.append(SpanPlan(name, runtime, stages[first], stages[last], kind, attributes))
    if "model_request" in stages:
        spans.append(_model_span(record, stages, destination))
    for compaction in record.compactions:
        spans.append(
            SpanPlan(
                f"xrmq.compaction {compaction.kind}",
                destination,
                compaction.started_us,
                compaction.ended_us,
                attributes={
                    "xrmq.compaction.kind": compaction.kind,
                    "xrmq.compaction.outcome": compaction.outcome,
                    "xrmq.compaction.steps": compaction.steps,
                    "xrmq.compaction.still_over": compaction.still_over,
                },
            )
        )
    if "first_played" in stages:
        spans.append(_playback_span(record, stages, router))
    for call in record.tool_calls:
        spans.append(
            SpanPlan(
                f"execute_tool {call.name}",
                destination,
                call.started_us,
                call.ended_us,
                attributes={"gen_ai.operation.name": "execute_tool", "gen_ai.tool.name": call.name},
                error="tool call failed" if call.failed else None,
            )
        )
    return spans


def _model_span(record: TurnRecord, stages: dict[str, int], destination: str) -> SpanPlan:
    """The model call, from its request to the turn's end (GenAI semantic conventions)."""
    model = record.model or "unknown"
    usage = record.usage
    attributes = _present(
        {
            "gen_ai.operation.name": "chat",
            "gen_ai.provider.name": provider_of(model),
            "gen_ai.request.model": model,
            "gen_ai.usage.input_tokens": usage.prompt_tokens if usage else None,
            "gen_ai.usage.output_tokens": usage.completion_tokens if usage else None,
            "xrmq.usage.reasoning_tokens": usage.reasoning_tokens if usage else None,
            "xrmq.usage.estimated": usage.estimated if usage and usage.estimated else None,
            "xrmq.usage.cost_usd": usage.cost_usd if usage else None,
        }
    )
    marks = (("gen_ai.first_token", "first_token"), ("xrmq.first_chunk", "first_chunk"))
    events = tuple((name, stages[stage]) for name, stage in marks if stage in stages)
    return SpanPlan(
        f"chat {model}",
        destination,
        stages["model_request"],
        max(stages["model_request"], stages["ended"]),
        kind="client",
        attributes=attributes,
        events=events,
    )


def _playback_span(record: TurnRecord, stages: dict[str, int], router: str) -> SpanPlan:
    """The reply's playback in the voice renderer, from its first chunk handed to the sink
    to its last audio frame (the first frame an event)."""
    last = stages.get("last_frame", stages.get("first_frame", stages["first_played"]))
    return SpanPlan(
        "xrmq.playback",
        record.renderer or router,
        stages["first_played"],
        max(stages["first_played"], last),
        events=(("xrmq.first_frame", stages["first_frame"]),) if "first_frame" in stages else (),
    )


def _present(attributes: dict[str, Any]) -> dict[str, Any]:
    """The attributes that have a value (an absent stage or count is left out, never zero)."""
    return {key: value for key, value in attributes.items() if value is not None}
