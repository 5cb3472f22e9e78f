"""Issue 33 item 1: every turn leaves one ``TurnRecord`` (schemas/turns.py) on ``xrmq.turns``.

Through a real box (``xrmq up`` with the router, the conversation and the context in
their own processes) a text turn's record has every stage it passed, in order, each
duration >= 0, and its query-to-first-chunk no longer than the client measured; the
model's usage is the provider's when it reports it, priced when litellm knows the model,
and estimated from the text when it reports none.
"""

from __future__ import annotations

import time

import msgspec
import pytest
import structlog
from structlog.testing import capture_logs

from xrmq.actors import logs as actor_logs
from xrmq.actors.clock import now_us
from xrmq.actors.context import ContextManager, utf8_size
from xrmq.actors.conversation import Conversation, estimate_tokens
from xrmq.actors.models import (
    LiteLLMService,
    ScriptedLLM,
    ScriptedResponse,
    ToolCall,
    Usage,
)
from xrmq.actors.routing import AgentRouter, turn_report
from xrmq.actors.routing.decisions import KeywordDecisions
from xrmq.actors.routing.policy import RouteResult
from xrmq.actors.routing.turn_report import TurnTimes, turn_record
from xrmq.actors.runtime import AgentRuntime
from xrmq.actors.tools.tool import Tool
from xrmq.actors.tools.tool_agent import ToolAgent
from xrmq.schemas import (
    STAGES,
    AgentTurn,
    ConversationContextUpdate,
    SectionSize,
    TurnUsage,
    UserQuery,
)
from xrmq.topics import QUERY_TOPIC, TURNS_TOPIC, VOICE_OUTPUT_TOPIC

from edge_box import Front, UpProcess, stack_config
from openai_server import OpenAIServer, Reply
from recorders import TurnRecorder
from router_doubles import FakeContext

pytestmark = pytest.mark.timeout(90)

CAUSAL = ("query", "received", "routed", "model_request", "first_token", "first_chunk", "ended")
"""The stages one causes the next of, whatever the process: ``admitted`` overlaps the model
request of a remote destination (it starts answering as it admits)."""


async def test_a_text_turn_through_a_box_leaves_one_record_with_its_stages_in_order(tmp_path):
    up = UpProcess(stack_config(tmp_path, tokens_per_second=200))
    try:
        await up.line("xrmq up: ready")
        front = Front(f"ipc://{tmp_path}/bus")
        recorder = TurnRecorder()
        front.runtime.register("turns", recorder)
        async with front:
            turn = front.turn("p1", "How warm is the kettle?")
            await turn.wait(20)
            await turn.ended.wait()
            [record] = await recorder.until(1)
            received_s = time.monotonic() - turn.sent
    finally:
        up.reap()
    assert (record.turn_id, record.participant_id, record.status, record.route) == (
        turn.request_id,
        "p1",
        "answered",
        "conversation",
    )
    stages = record.stages()
    assert list(stages) == [stage for stage in STAGES if stage in stages]
    assert set(CAUSAL) <= set(stages) and "admitted" in stages
    times = [stages[stage] for stage in CAUSAL]
    assert times == sorted(times), stages  # each duration >= 0
    assert stages["routed"] <= stages["admitted"] <= stages["ended"]
    assert turn.sent_us <= record.query_us
    assert turn.first_chunk_s is not None
    # the record's stages were stamped before the client got the record, its query after
    # sent. The client's first chunk does not bound the first_chunk stage: that is stamped
    # once the chunk's publication returns (it waits for the router's admission), and a
    # client on the other core may read the chunk first (a clean CI run saw 56,814 us of
    # stages against the client's 56,780 us); the ordering above bounds it by the end.
    assert stages["ended"] - stages["query"] <= received_s * 1e6
    # the box's renderer (a console sink: no audio frames) played the reply in its process
    assert set(record.crossed) == {
        "query",
        "model_request",
        "first_token",
        "first_chunk",
        "first_played",
    }
    assert stages["first_chunk"] <= stages["first_played"]
    assert "first_frame" not in stages and "last_frame" not in stages
    assert record.model == "offline"
    assert record.usage is not None and record.usage.completion_tokens


class Desk:
    """The conversation's runtime and context: publishes nowhere, holds no context."""

    name = "desk"

    async def publish(self, topic, message, **kwargs) -> None:
        pass

    def blocks(self, participant_id):
        return ()

    def record_exchange(self, participant_id, request, answer, *, timestamp_us, exchange_id):
        pass

    def reconcile_history(self, participant_id, exchanges, *, exchange_ids):
        pass


async def answer_on(reply: Reply):
    """One answer of a conversation on a loopback OpenAI-compatible server replying ``reply``:
    the stages its result carries, and the request the model was sent."""
    with OpenAIServer(reply) as server:
        llm = LiteLLMService("openai/gpt-4o-mini", api_base=server.api_base, api_key="k")
        desk = Desk()
        conversation = Conversation(
            llm, context=desk, runtime=desk, output_topic=VOICE_OUTPUT_TOPIC
        )
        turn = AgentTurn("p1", "t1", "Where is the red mug?")

        async def started() -> None:
            pass

        result = await conversation.answer(turn, started=started)
        return result.stages, conversation.request(turn)


async def test_usage_is_the_providers_when_it_reports_it_and_priced_from_litellms_table():
    usage = {"prompt_tokens": 120, "completion_tokens": 7, "total_tokens": 127}
    stages, _ = await answer_on(Reply(chunks=("On the ", "desk."), usage=usage))
    assert stages is not None and stages.usage is not None
    assert (stages.usage.prompt_tokens, stages.usage.completion_tokens) == (120, 7)
    assert not stages.usage.estimated
    assert stages.usage.cost_usd is not None and stages.usage.cost_usd > 0
    assert stages.model == "openai/gpt-4o-mini" and stages.runtime == "desk"
    assert stages.model_request_us <= stages.first_token_us <= stages.first_chunk_us


async def test_usage_is_counted_by_litellm_when_the_provider_reports_none():
    """litellm counts the tokens with the model's tokenizer then (indistinguishable from a
    provider's counts in its stream), so the record still has counts and a price."""
    stages, _ = await answer_on(Reply(chunks=("On the ", "desk.")))
    assert stages is not None and stages.usage is not None
    assert stages.usage.prompt_tokens and stages.usage.completion_tokens
    assert stages.usage.cost_usd is not None


async def test_usage_is_estimated_from_the_text_when_the_model_reports_none():
    desk = Desk()
    llm = ScriptedLLM(ScriptedResponse(chunks=("On the ", "desk.")))
    conversation = Conversation(llm, context=desk, runtime=desk, output_topic=VOICE_OUTPUT_TOPIC)
    turn = AgentTurn("p1", "t1", "Where is the red mug?")

    async def started() -> None:
        pass

    result = await conversation.answer(turn, started=started)
    usage = result.stages.usage
    assert usage is not None and usage.estimated and usage.cost_usd is None
    assert usage.completion_tokens == estimate_tokens("On the desk.")
    request = conversation.request(turn)
    assert usage.prompt_tokens == sum(estimate_tokens(m.content) for m in request)


async def test_each_turn_is_logged_as_one_turn_done_line_with_its_stages_and_usage():
    structlog.reset_defaults()  # at INFO, as ``xrmq up``'s processes log (conftest restores)
    actor_logs._configured = False
    actor_logs.configure_logging(level="INFO")
    desk = Desk()
    llm = ScriptedLLM(ScriptedResponse(chunks=("On the ", "desk.")))
    conversation = Conversation(llm, context=desk, runtime=desk, output_topic=VOICE_OUTPUT_TOPIC)

    async def say(turn, route, text) -> None:
        pass

    router = AgentRouter(
        {"conversation": conversation}, KeywordDecisions(), output=say, default="conversation"
    )
    with capture_logs() as logs:
        result = await router.handle(AgentTurn("p1", "t1", "Where is the red mug?"))
    assert result.status == "answered"
    [done] = [line for line in logs if line["event"] == "turn.done"]
    assert (done["turn"], done["participant"], done["status"], done["route"]) == (
        "t1",
        "p1",
        "answered",
        "conversation",
    )
    assert done["received_us"] <= done["routed_us"] <= done["model_request_us"]
    assert done["first_token_us"] <= done["first_chunk_us"] <= done["ended_us"]
    assert "query_us" not in done  # handed in directly: no query was published
    assert done["usage"]["estimated"] is True and "crossed" not in done  # one process


@pytest.mark.parametrize(
    ("level", "record_topic", "built"),
    [
        ("WARNING", None, 0),
        ("INFO", None, 1),
        ("WARNING", TURNS_TOPIC, 1),
    ],
)
async def test_a_router_that_neither_publishes_nor_logs_records_builds_none(
    monkeypatch, level, record_topic, built
):
    """Telemetry off (no record topic, the log above INFO) costs the turn no record."""
    structlog.reset_defaults()  # conftest restores
    actor_logs._configured = False
    actor_logs.configure_logging(level=level)
    calls = []

    def counted(*args):
        calls.append(args)
        return turn_record(*args)

    monkeypatch.setattr(turn_report, "turn_record", counted)
    llm = ScriptedLLM(ScriptedResponse(chunks=("On the ", "desk.")))
    desk = Desk()
    conversation = Conversation(llm, context=desk, runtime=desk, output_topic=VOICE_OUTPUT_TOPIC)

    async def say(turn, route, text) -> None:
        pass

    router = AgentRouter(
        {"conversation": conversation},
        KeywordDecisions(),
        output=say,
        default="conversation",
        record_topic=record_topic,
    )
    result = await router.handle(AgentTurn("p1", "t1", "Where is the red mug?"))
    assert result.status == "answered"
    assert len(calls) == built


async def test_a_spoken_query_adds_its_speech_and_transcript_stages_before_the_query(tmp_path):
    """As the voice input sends it (``actors/voice/listener.py``): speech start and end and
    the transcript's time ride in the ``UserQuery``, taken in the voice input's process."""
    up = UpProcess(stack_config(tmp_path, tokens_per_second=200))
    try:
        await up.line("xrmq up: ready")
        front = Front(f"ipc://{tmp_path}/bus")
        recorder = TurnRecorder()
        front.runtime.register("turns", recorder)
        async with front:
            now = now_us()
            query = UserQuery(
                "How warm is the kettle?",
                now - 1_500_000,
                speech_end_us=now - 400_000,
                transcribed_us=now,
            )
            request_id = front.runtime.send(
                QUERY_TOPIC, query, participant_id="p2", source="voice-input"
            )
            [record] = await recorder.until(1)
    finally:
        up.reap()
    assert record.turn_id == request_id and record.status == "answered"
    stages = record.stages()
    assert list(stages)[:4] == ["speech_start", "speech_end", "transcribed", "query"]
    assert (stages["speech_start"], stages["speech_end"], stages["transcribed"]) == (
        query.timestamp_us,
        query.speech_end_us,
        query.transcribed_us,
    )
    times = [stages[stage] for stage in ("speech_start", *CAUSAL)]
    assert times == sorted(times), stages
    assert {"speech_start", "speech_end", "transcribed", "query"} <= set(record.crossed)


class Where(msgspec.Struct):
    pass


async def test_a_tool_agents_stages_span_its_model_calls_with_its_tool_calls_and_usage():
    llm = ScriptedLLM(
        ScriptedResponse(
            tool_calls=(ToolCall("c1", "where", "{}"),),
            usage=Usage(100, 5, reasoning_tokens=3, cost_usd=0.001),
        ),
        ScriptedResponse(chunks=("On the ", "desk."), usage=Usage(130, 4, cost_usd=0.002)),
    )
    async with AgentRuntime() as runtime:
        agent = ToolAgent(
            llm,
            context=FakeContext(),
            runtime=runtime,
            output_topic=VOICE_OUTPUT_TOPIC,
            tools=[Tool("where", "Where the mug is.", Where, lambda args: "desk")],
        )

        async def started() -> None:
            pass

        result = await agent.answer(AgentTurn("p1", "t1", "Where is the mug?"), started=started)
    stages = result.stages
    assert stages is not None and stages.runtime == runtime.name and stages.model == "scripted"
    assert stages.model_request_us <= stages.first_token_us <= stages.first_chunk_us
    assert stages.usage == TurnUsage(230, 9, 3, cost_usd=pytest.approx(0.003))
    [call] = stages.tool_calls
    assert (call.name, call.failed) == ("where", False)
    assert stages.model_request_us <= call.started_us <= call.ended_us <= stages.first_token_us


async def test_the_record_has_each_context_section_the_request_carried_against_its_budget():
    """Sizes as the request rendered them (before the exchange is recorded), in configured
    order; a section the participant has nothing in on this host is absent, not zero."""
    runtime = AgentRuntime()
    context = ContextManager(
        ScriptedLLM(),
        incremental_context_topics=("sample.notes",),
        summary_context_topics=("sample.monitor-window",),
        dialogue_budget_bytes=4096,
        topic_budget_bytes=2048,
    )
    runtime.register("context", context.subscriber())
    async with runtime:
        try:
            note = ConversationContextUpdate("The red mug is on the desk.")
            await context.update("p1", "sample.notes", note, mode="incremental")
            [block] = context.blocks("p1")
            llm = ScriptedLLM(ScriptedResponse(chunks=("On the ", "desk.")))
            conversation = Conversation(
                llm, context=context, runtime=runtime, output_topic=VOICE_OUTPUT_TOPIC
            )

            async def started() -> None:
                pass

            turn = AgentTurn("p1", "t1", "Where is the red mug?")
            result = await conversation.answer(turn, started=started)
        finally:
            await context.close()
    assert result.stages.context == (
        SectionSize("dialogue", 0, 4096),
        SectionSize("sample.notes", utf8_size(block.text), 2048),
    )
    times = TurnTimes(now_us())
    times.stages = result.stages
    record = turn_record(turn, RouteResult("t1", "answered"), times, "router")
    assert record.context == result.stages.context


async def test_a_context_that_does_not_report_its_sizes_leaves_them_out_of_the_record():
    stages, _ = await answer_on_desk()
    assert stages.context == ()
    times = TurnTimes(now_us())
    times.stages = stages
    record = turn_record(AgentTurn("p1", "t1", "Hi"), RouteResult("t1", "answered"), times, None)
    assert "context" not in msgspec.to_builtins(record)


async def answer_on_desk():
    desk = Desk()
    llm = ScriptedLLM(ScriptedResponse(chunks=("On the ", "desk.")))
    conversation = Conversation(llm, context=desk, runtime=desk, output_topic=VOICE_OUTPUT_TOPIC)
    turn = AgentTurn("p1", "t1", "Where is the red mug?")

    async def started() -> None:
        pass

    result = await conversation.answer(turn, started=started)
    return result.stages, turn


async def test_record_observers_see_each_record_in_process_and_one_that_raises_is_only_logged():
    """An exporter observes the records where the router runs, without a bus hop: even a
    router that neither publishes nor logs them builds them for it."""
    seen = []

    def broken(record) -> None:
        raise RuntimeError("exporter bug")

    llm = ScriptedLLM(ScriptedResponse(chunks=("On the ", "desk.")))
    desk = Desk()
    conversation = Conversation(llm, context=desk, runtime=desk, output_topic=VOICE_OUTPUT_TOPIC)

    async def say(turn, route, text) -> None:
        pass

    router = AgentRouter(
        {"conversation": conversation},
        KeywordDecisions(),
        output=say,
        default="conversation",
        record_topic=None,
    )
    router.record_observers += [broken, seen.append]
    with capture_logs() as logs:
        result = await router.handle(AgentTurn("p1", "t1", "Where is the red mug?"))
    assert result.status == "answered"
    [record] = seen
    assert (record.turn_id, record.status, record.route) == ("t1", "answered", "conversation")
    [failed] = [line for line in logs if line["event"] == "turn.observer_failed"]
    assert failed["turn"] == "t1" and "exporter bug" in failed["error"]
