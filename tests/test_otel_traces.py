"""Every turn as an OpenTelemetry trace (``[telemetry] otlp_endpoint``), through a real box.

A collector on loopback speaking OTLP/HTTP (``otlp_receiver.py``, the protobuf decoded with
``opentelemetry-proto``) gets one trace per turn: its spans come from the client, the router
and the conversation processes, joined under the turn's root span, the model span carries
the GenAI semantic conventions' attributes, a spoken turn's speech and transcription are
spans of the client, and a turn whose client sent a W3C ``traceparent`` joins the client's
trace. Without the setting nothing is sent, and OpenTelemetry is not even imported. The
span plan itself (``actors/edge/telemetry.py``) and the exporter's queue are checked
without a box.
"""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys

import pytest
from otlp_receiver import OTLPReceiver

from xrmq.actors.clock import now_us
from xrmq.actors.edge.config import ConfigError
from xrmq.actors.edge.config_loader import decode_config
from xrmq.actors.edge.telemetry import trace_id_of_turn, traces_endpoint, turn_spans
from xrmq.schemas import ToolCallTime, TurnRecord, TurnUsage, UserQuery
from xrmq.topics import QUERY_TOPIC

from edge_box import Front, UpProcess, stack_config
from recorders import TurnRecorder

pytestmark = pytest.mark.timeout(90)

CLIENT_TRACE = "4bf92f3577b34da6a3ce929d0e0e4736"
CLIENT_SPAN = "00f067aa0ba902b7"


def roots_of(spans):
    return {s.attributes["xrmq.turn.id"]: s for s in spans if s.name == "xrmq.turn"}


async def test_each_turn_is_one_trace_of_spans_from_three_processes_with_genai_attributes(
    tmp_path, monkeypatch
):
    monkeypatch.delenv("OTEL_EXPORTER_OTLP_ENDPOINT", raising=False)
    with OTLPReceiver() as receiver:
        extra = f'[telemetry]\notlp_endpoint = "{receiver.endpoint}"\n'
        config = stack_config(tmp_path, tokens_per_second=200, extra=extra)
        up = UpProcess(config, env={"OTEL_BSP_SCHEDULE_DELAY": "50"})
        try:
            await up.line("xrmq up: ready")
            front = Front(f"ipc://{tmp_path}/bus")
            async with front:
                plain = front.turn("p1", "How warm is the kettle?")
                await plain.ended.wait()
                traced = front.turn(
                    "p2", "Where is the red mug?", traceparent=f"00-{CLIENT_TRACE}-{CLIENT_SPAN}-01"
                )
                await traced.ended.wait()
                now = now_us()  # a spoken query, as the voice input sends it
                spoken = UserQuery(
                    "Is the kettle on?",
                    now - 900_000,
                    speech_end_us=now - 300_000,
                    transcribed_us=now,
                )
                spoken_id = front.runtime.send(
                    QUERY_TOPIC, spoken, participant_id="p3", source="voice-input"
                )
                turns = {plain.request_id, traced.request_id, spoken_id}
                await receiver.until(lambda spans: turns <= set(roots_of(spans)))
        finally:
            up.reap()
    roots = roots_of(receiver.spans)
    assert len([s for s in receiver.spans if s.name == "xrmq.turn"]) == 3  # one trace per turn
    voiced = {s.name: s for s in receiver.spans if s.trace_id == roots[spoken_id].trace_id}
    client = voiced["voice.query publish"].resource["service.instance.id"]
    for name, start, end in (
        ("xrmq.speech", spoken.timestamp_us, spoken.speech_end_us),
        ("xrmq.transcribe", spoken.speech_end_us, spoken.transcribed_us),
    ):
        assert (voiced[name].start_ns, voiced[name].end_ns) == (start * 1000, end * 1000)
        assert voiced[name].resource["service.instance.id"] == client
    assert "xrmq.speech" not in {
        s.name for s in receiver.spans if s.trace_id != roots[spoken_id].trace_id
    }
    assert roots[plain.request_id].trace_id == f"{trace_id_of_turn(plain.request_id):032x}"
    assert roots[plain.request_id].parent_span_id == ""
    assert (roots[traced.request_id].trace_id, roots[traced.request_id].parent_span_id) == (
        CLIENT_TRACE,
        CLIENT_SPAN,
    )
    for turn_id, root in roots.items():
        trace = [s for s in receiver.spans if s.trace_id == root.trace_id]
        ids = {s.span_id for s in trace}
        assert all(s.parent_span_id in ids for s in trace if s is not root), turn_id
        processes = {s.resource["service.instance.id"] for s in trace}
        assert {"router", "conversation"} < processes and len(processes) >= 3, processes
        assert all(s.start_ns <= s.end_ns for s in trace)
        assert "voice.query publish" in {s.name for s in trace}
        assert root.events == ["xrmq.received", "xrmq.routed", "xrmq.admitted"]
        [model] = [s for s in trace if s.name == "chat offline"]
        assert model.resource["service.instance.id"] == "conversation"
        assert model.attributes["gen_ai.operation.name"] == "chat"
        assert model.attributes["gen_ai.request.model"] == "offline"
        assert model.attributes["gen_ai.usage.input_tokens"] > 0
        assert model.attributes["gen_ai.usage.output_tokens"] > 0
        assert model.events == ["gen_ai.first_token", "xrmq.first_chunk"]


async def test_nothing_is_sent_without_the_setting(tmp_path, monkeypatch):
    monkeypatch.delenv("OTEL_EXPORTER_OTLP_ENDPOINT", raising=False)
    monkeypatch.delenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", raising=False)
    with OTLPReceiver() as receiver:
        up = UpProcess(stack_config(tmp_path, tokens_per_second=200))
        try:
            await up.line("xrmq up: ready")
            front = Front(f"ipc://{tmp_path}/bus")
            recorder = TurnRecorder()
            front.runtime.register("turns", recorder)
            async with front:
                turn = front.turn("p1", "How warm is the kettle?")
                await turn.ended.wait()
                await recorder.until(1)
        finally:
            up.reap()  # a box that exported would have flushed by the time it stopped
        assert receiver.requests == 0


def test_a_router_process_without_the_setting_imports_no_opentelemetry():
    script = """
import sys
from xrmq.actors.edge.config_loader import default_config
from xrmq.actors.edge.stack import router_role
from xrmq.actors.runtime import AgentRuntime
config = default_config()
router_role(AgentRuntime(name="r"), config, config.instances("router")[0])
print(sorted(m for m in sys.modules if m.startswith("opentelemetry")))
"""
    env = {k: v for k, v in os.environ.items() if not k.startswith("OTEL_")}
    out = subprocess.run(
        [sys.executable, "-c", script], env=env, capture_output=True, text=True, check=True
    )
    assert out.stdout.strip() == "[]"


def test_the_endpoint_is_the_configs_else_the_standard_variables():
    env = {"OTEL_EXPORTER_OTLP_ENDPOINT": "http://collector:4318/"}
    assert traces_endpoint("http://box:4318", env) == "http://box:4318/v1/traces"
    assert traces_endpoint(None, env) == "http://collector:4318/v1/traces"
    traces = {**env, "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "http://t:1/traces"}
    assert traces_endpoint(None, traces) == "http://t:1/traces"
    assert traces_endpoint(None, {}) is None


def test_a_stage_the_turn_did_not_pass_makes_no_span_and_tool_calls_are_spans_of_their_own():
    record = TurnRecord(
        "t1",
        "p1",
        "answered",
        router="router",
        client="front",
        destination="tools",
        query_us=100,
        received_us=110,
        routed_us=120,
        model_request_us=130,
        first_token_us=150,
        ended_us=400,
        model="openai/gpt-4o-mini",
        usage=TurnUsage(prompt_tokens=12),
        tool_calls=(ToolCallTime("camera__look", 200, 260, failed=True),),
    )
    spans = turn_spans(record)
    names = [s.name for s in spans]
    assert names == [
        "xrmq.turn",
        "voice.query publish",
        "chat openai/gpt-4o-mini",
        "execute_tool camera__look",
    ]  # no speech, no transcription: the record has none of their stages
    root, publish, model, tool = spans
    assert (root.start_us, root.end_us, root.parent) == (100, 400, None)
    assert root.events == (("xrmq.received", 110), ("xrmq.routed", 120))  # no admission
    assert publish.runtime == "front" and model.runtime == tool.runtime == "tools"
    assert model.attributes["gen_ai.provider.name"] == "openai"
    assert "gen_ai.usage.output_tokens" not in model.attributes  # absent, not zero
    assert model.events == (("gen_ai.first_token", 150),)
    assert tool.attributes["gen_ai.tool.name"] == "camera__look" and tool.error
    assert tool.parent == 0


def test_a_turn_without_an_end_has_no_trace():
    assert turn_spans(TurnRecord("t1", "p1", "answered", query_us=1)) == []


async def test_stopping_the_exporter_sends_what_it_queued_with_the_records_times_and_ids():
    from xrmq.actors.edge.otlp import TraceExporter

    with OTLPReceiver() as receiver:
        exporter = TraceExporter(f"{receiver.endpoint}/v1/traces", schedule_delay_ms=60_000)
        record = TurnRecord(
            "t1",
            "p1",
            "failed",
            error="ModelTimeout: no token in 5 s",
            router="router",
            client="front",
            query_us=1_000,
            received_us=1_200,
            ended_us=9_000,
            traceparent=f"00-{CLIENT_TRACE}-{CLIENT_SPAN}-01",
        )
        exporter.observe(record)
        assert receiver.requests == 0  # queued, not sent on the turn's path
        await exporter.on_stop()
        await receiver.until(lambda spans: len(spans) == 2)
    root, publish = sorted(receiver.spans, key=lambda s: s.name != "xrmq.turn")
    assert (root.name, publish.name) == ("xrmq.turn", "voice.query publish")
    assert root.trace_id == publish.trace_id == CLIENT_TRACE
    assert root.parent_span_id == CLIENT_SPAN
    assert publish.parent_span_id == root.span_id
    assert (root.start_ns, root.end_ns) == (1_000_000, 9_000_000)
    assert root.status == (2, "ModelTimeout: no token in 5 s")  # STATUS_CODE_ERROR
    assert root.kind == 2 and publish.kind == 4  # server, producer
    assert publish.resource["service.instance.id"] == "front"
    assert root.resource == {"service.name": "xrmq", "service.instance.id": "router"}


async def test_a_collector_that_refuses_loses_the_batch_counted_and_one_that_takes_it_gets_it():
    from xrmq.actors.edge.otlp import TraceExporter

    refused = TraceExporter("http://127.0.0.1:9/v1/traces", schedule_delay_ms=60_000)
    refused.observe(TurnRecord("t1", "p1", "answered", query_us=1, received_us=2, ended_us=3))
    assert refused.flush(2_000) is False and refused.failed_spans == 2
    with OTLPReceiver() as receiver:
        exporter = TraceExporter(f"{receiver.endpoint}/v1/traces", schedule_delay_ms=60_000)
        exporter.observe(TurnRecord("t2", "p1", "answered", query_us=1, received_us=2, ended_us=3))
        assert await asyncio.to_thread(exporter.flush) and exporter.sent_spans == 2
        await receiver.until(lambda spans: len(spans) == 2)


async def test_the_standard_header_variables_reach_the_collector(monkeypatch):
    """A collector behind a key: ``OTEL_EXPORTER_OTLP_HEADERS`` (percent-encoded values),
    and the traces-only variable before it, as the OpenTelemetry specification has it."""
    from xrmq.actors.edge.otlp import TraceExporter

    monkeypatch.setenv("OTEL_EXPORTER_OTLP_HEADERS", "api-key=general,x-tenant=lab%203")
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_TRACES_HEADERS", "api-key=s3cr%3Dt, x-tenant=lab%203")
    with OTLPReceiver() as receiver:
        exporter = TraceExporter(f"{receiver.endpoint}/v1/traces", schedule_delay_ms=60_000)
        exporter.observe(TurnRecord("t1", "p1", "answered", query_us=1, received_us=2, ended_us=3))
        assert await asyncio.to_thread(exporter.flush)
        await receiver.until(lambda spans: len(spans) == 2)
    (headers,) = receiver.headers
    assert headers["api-key"] == "s3cr=t" and headers["x-tenant"] == "lab 3"
    assert headers["Content-Type"] == "application/x-protobuf"


def test_a_malformed_header_variable_fails_the_check_naming_it(monkeypatch):
    from xrmq.actors.edge import checks

    config = decode_config({"telemetry": {"otlp_endpoint": "http://127.0.0.1:4318"}})
    checks.check_can_answer(config)  # the exporter needs no package beyond the standard library
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_HEADERS", "api-key")
    with pytest.raises(
        ConfigError, match=r"telemetry\.otlp_endpoint: OTEL_EXPORTER_OTLP_HEADERS: each header"
    ):
        checks.check_can_answer(config)
    checks.check_can_answer(decode_config({}))  # no collector named: the headers are not read
