"""ToolAgent: the tool loop, the framing of docs/context.md, barge-in, docs/tools.md in a long
session, and a
ToolAgent sharing a participant's context with a Conversation behind one router."""

from __future__ import annotations

import asyncio
import itertools

import msgspec
from tools_doubles import (
    SECRET,
    Probe,
    never_started,
    plain,
    probe_reading,
    request_tokens,
    session_model,
    tool_agent,
    turn,
)

from xrmq.actors.context import ContextManager
from xrmq.actors.conversation import Conversation
from xrmq.actors.models import (
    ChatMessage,
    OfflineLLM,
    ScriptedLLM,
    ScriptedResponse,
    ToolCall,
)
from xrmq.actors.routing import AgentRouter
from xrmq.actors.runtime import AgentRuntime
from xrmq.actors.tools.client import remote_tool
from xrmq.actors.tools.policy import AutoCompactor
from xrmq.actors.tools.server import serve_tools
from xrmq.actors.tools.tiers import SummaryCompactResult, ToolCallCompactResult
from xrmq.actors.tools.tool import Tool
from xrmq.actors.tools.tool_agent import EXTRACT_TOOL
from xrmq.topics import VOICE_OUTPUT_TOPIC

from router_doubles import Decisions, FakeContext, Log, OutputRecorder, router_output


class View(msgspec.Struct):
    pass


def describe_view(args: View) -> dict[str, object]:
    return {"bench": ["a red multimeter", "a soldering iron"], "lighting": "bright"}


def calls(*pairs: tuple[str, str, str]) -> ScriptedResponse:
    return ScriptedResponse(tool_calls=tuple(ToolCall(*pair) for pair in pairs))


async def test_the_offline_model_calls_the_matching_tool_and_answers_from_its_result() -> None:
    context = FakeContext()
    runtime = AgentRuntime()
    recorder = runtime.register("recorder", OutputRecorder())
    serve_tools(
        runtime,
        "camera",
        [Tool("describe_view", "Describe what the camera sees on the bench.", View, describe_view)],
    )
    async with runtime:
        agent = tool_agent(
            runtime,
            OfflineLLM(time_to_first_token_s=0, tokens_per_second=0),
            context=context,
            servers=["camera"],
        )
        result = await agent.answer(turn("t1", "What is on the bench?"), started=never_started)
        await recorder.wait_for(lambda frames: recorder.finals() == 1)
    assert result.response is not None and "red multimeter" in result.response
    assert recorder.texts("p1").strip() == result.response
    held = plain(agent.transcript("p1").messages)
    roles = [(m["role"], bool(m.get("tool_calls"))) for m in held]
    assert roles == [("user", False), ("assistant", True), ("tool", False), ("assistant", False)]
    assert held[1]["tool_calls"][0]["function"]["name"] == "camera__describe_view"
    assert context.log == [("record", "p1", "t1")]


async def test_several_calls_in_one_response_run_in_parallel_and_all_results_go_back() -> None:
    gate, arrived = asyncio.Event(), []

    async def visit(args: Probe) -> str:
        arrived.append(args.index)
        if len(arrived) == 2:
            gate.set()
        await gate.wait()
        return f"room {args.index} is clear"

    llm = ScriptedLLM(
        calls(("a", "rooms__visit", '{"index": 1}'), ("b", "rooms__visit", '{"index": 2}')),
        "Both rooms are clear.",
    )
    runtime = AgentRuntime()
    serve_tools(runtime, "rooms", [Tool("visit", "Visit a room.", Probe, visit)])
    async with runtime:
        agent = tool_agent(
            runtime,
            llm,
            tools=[remote_tool("rooms", "visit", description="Visit a room.", args=Probe)],
        )
        result = await agent.answer(turn("t1", "Are the rooms clear?"), started=never_started)
    assert result.response == "Both rooms are clear."
    second = llm.requests[1]
    assert [(m.tool_call_id, m.content) for m in second.messages if m.role == "tool"] == [
        ("a", "room 1 is clear"),
        ("b", "room 2 is clear"),
    ]
    assert [tool.name for tool in second.tools] == ["rooms__visit", EXTRACT_TOOL.name]


async def test_max_iterations_ends_with_a_request_offering_no_tools() -> None:
    llm = ScriptedLLM(*(calls((f"c{i}", "echo", "{}")) for i in range(2)), "Giving up on the echo.")
    async with AgentRuntime() as runtime:
        agent = tool_agent(
            runtime,
            llm,
            tools=[Tool("echo", "Echo.", View, lambda args: "echo")],
            max_iterations=3,
        )
        result = await agent.answer(turn("t1", "Echo forever."), started=never_started)
    assert result.response == "Giving up on the echo."
    assert [len(request.tools) for request in llm.requests] == [2, 2, 0]


async def test_barge_in_during_a_long_tool_call_cancels_it_records_nothing_next_turn_works() -> (
    None
):
    running, cancelled = asyncio.Event(), asyncio.Event()

    async def survey(args: View) -> str:
        running.set()
        try:
            await asyncio.Event().wait()
        finally:
            cancelled.set()
        return "never"

    llm = ScriptedLLM(
        ScriptedResponse("Let me look.", tool_calls=(ToolCall("s1", "lab__survey", "{}"),)),
        calls(("s2", "lab__quick", "{}")),
        "The lab is quiet.",
    )
    context = FakeContext()
    runtime = AgentRuntime()
    recorder = runtime.register("recorder", OutputRecorder())
    server = serve_tools(
        runtime,
        "lab",
        [
            Tool("survey", "Survey the lab.", View, survey),
            Tool("quick", "Quick look.", View, lambda args: "quiet"),
        ],
    )
    async with runtime:
        agent = tool_agent(runtime, llm, context=context, servers=["lab"])
        task = asyncio.create_task(
            agent.answer(turn("t1", "Survey the lab."), started=never_started)
        )
        await running.wait()
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
        await asyncio.wait_for(cancelled.wait(), 5)
        assert task.cancelled() and server.cancelled == 1
        assert agent.transcript("p1").all_messages() == [] and context.log == []
        # The cancelled reply was closed with its final frame (it had published "Let me look.").
        await recorder.wait_for(lambda frames: recorder.finals() == 1)
        result = await agent.answer(turn("t2", "Is the lab quiet?"), started=never_started)
    assert result.response == "The lab is quiet."
    assert context.log == [("record", "p1", "t2")]
    assert [m.content for m in llm.requests[1].messages if m.role == "user"][
        -1
    ] == "Is the lab quiet?"
    assert all("Survey the lab." not in m.content for m in llm.requests[1].messages)


async def test_a_200_call_session_stays_within_its_limit_and_a_reclaimed_original_answers() -> None:
    threshold = 8_000
    llm = session_model()
    async with AgentRuntime() as runtime:
        agent = tool_agent(
            runtime,
            llm,
            tools=[Tool("probe", "Read a probe.", Probe, probe_reading)],
            compactor=AutoCompactor(token_threshold=threshold),
        )
        for index in range(1, 201):
            await agent.answer(turn(f"t{index}", f"Read probe {index}."), started=never_started)
        transcript = agent.transcript("p1")
        # 190 was read 10 turns ago: its result is reclaimed or summarized, its ID still named.
        asked = len(llm.requests)
        result = await agent.answer(
            turn("t201", "What is the calibration code of probe 190?"), started=never_started
        )
    sizes = [request_tokens(request) for request in llm.requests]
    growth = max(b - a for a, b in itertools.pairwise(sizes))
    assert max(sizes) <= threshold + growth  # checked before each call: at most one step over
    # it would not fit
    assert sum(request_tokens(r) for r in llm.requests[:1]) < threshold < 200 * 500
    assert transcript.counters.toolcall_reclaimed > 0 and transcript.counters.summary_rounds > 0
    extract_request = llm.requests[asked]
    assert all(SECRET[190] not in m.content for m in extract_request.messages)
    assert result.response == f"Probe 190 code is {SECRET[190]}."


async def test_manual_compaction_by_tier() -> None:
    llm = session_model()
    async with AgentRuntime() as runtime:
        agent = tool_agent(
            runtime,
            llm,
            tools=[Tool("probe", "Read a probe.", Probe, probe_reading)],
            compactor=AutoCompactor(enabled=False),
        )
        for index in range(1, 15):
            await agent.answer(turn(f"t{index}", f"Read probe {index}."), started=never_started)
        reclaimed = await agent.compact("p1", tier="toolcall")
        assert isinstance(reclaimed, ToolCallCompactResult) and reclaimed.reclaimed_count == 2
        assert 0 < reclaimed.reclaimed_fraction < 1
        summary = await agent.compact("p1", tier="summary")
    assert isinstance(summary, SummaryCompactResult) and summary.status.value == "compacted"
    # The last user message's turn fits in 16: the cut is at it, and the rest is summarized.
    ids = " ".join(f"r{i}" for i in range(1, 14))
    assert agent.transcript("p1").summary == f"Probes were read in order; results by call ID: {ids}"
    assert [m["role"] for m in plain(agent.transcript("p1").messages)] == [
        "user",
        "assistant",
        "tool",
        "assistant",
    ]


async def test_a_tool_agent_and_a_conversation_behind_one_router_share_participant_context() -> (
    None
):
    log = Log()
    answers = ScriptedLLM("The multimeter on the bench is red.")
    context = ContextManager(answers)
    runtime = AgentRuntime()
    serve_tools(
        runtime,
        "camera",
        [Tool("describe_view", "Describe what the camera sees on the bench.", View, describe_view)],
    )
    async with runtime:
        tools = tool_agent(
            runtime,
            OfflineLLM(time_to_first_token_s=0, tokens_per_second=0),
            context=context,
            servers=["camera"],
        )
        conversation = Conversation(
            answers, context=context, runtime=runtime, output_topic=VOICE_OUTPUT_TOPIC
        )
        router = AgentRouter(
            {"conversation": conversation, "tools": tools},
            Decisions(log, "tools", "conversation"),
            output=router_output(log),
        )
        await router.handle(turn("t1", "What is on the bench?"))
        await router.handle(turn("t2", "What colour was the multimeter?"))
        await router.stop()
    await context.close()
    (request,) = answers.requests
    assert "red multimeter" in request.messages[1].content  # the tool answer, through the dialogue
    assert "User: What is on the bench?" in request.messages[1].content


async def test_tier2_summaries_come_from_the_compaction_workers() -> None:
    from xrmq.actors.context import context_plan, register_workers
    from xrmq.actors.tools.workers import WorkerSummarizer

    plan = context_plan(compaction_workers=2)
    runtime = AgentRuntime()
    register_workers(runtime, plan, OfflineLLM(time_to_first_token_s=0, tokens_per_second=0))
    summarizer = runtime.register("tools-summarizer", WorkerSummarizer(plan, timeout_s=10))
    llm = session_model()
    async with runtime:
        agent = tool_agent(
            runtime,
            llm,
            tools=[Tool("probe", "Read a probe.", Probe, probe_reading)],
            compactor=AutoCompactor(enabled=False),
            summarize=summarizer,
        )
        for index in range(1, 6):
            await agent.answer(turn(f"t{index}", f"Read probe {index}."), started=never_started)
        outcome = await agent.compact("p1", tier="summary")
    assert isinstance(outcome, SummaryCompactResult)
    assert outcome.status.value == "compacted" and summarizer.failed == 0
    summary = agent.transcript("p1").summary or ""
    # the offline model's extract, within the limit
    assert "Probe" in summary and len(summary.encode()) <= 4096
    assert not any("Summarize the earlier part" in r.messages[0].content for r in llm.requests)


async def test_the_transcript_lives_in_a_keyed_actor_and_a_new_agent_continues_from_it() -> None:
    from xrmq.actors.tools.store import (
        TranscriptLoad,
        TranscriptState,
        TranscriptTopics,
        held_messages,
        register_transcripts,
    )

    front = AgentRuntime(name="front")
    back = AgentRuntime(front.address, name="back")
    register_transcripts(back, "lab-tools")
    probe = Tool("probe", "Read a probe.", Probe, probe_reading)
    async with front, back:
        first = tool_agent(
            front,
            session_model(),
            tools=[probe],
            transcripts="lab-tools",
            compactor=AutoCompactor(enabled=False),
        )
        for index in range(1, 15):
            await first.answer(turn(f"t{index}", f"Read probe {index}."), started=never_started)
        await first.compact("p1", tier="toolcall")  # a rewrite: mirrored as a replace
        await first.answer(turn("t15", "Read probe 15."), started=never_started)
        llm = session_model()
        second = tool_agent(
            front,
            llm,
            tools=[probe],
            transcripts="lab-tools",
        )
        result = await second.answer(
            turn("t16", "What is the calibration code of probe 1?"), started=never_started
        )
        # A load asked after the writes is answered after them: the store's state now.
        stored = await front.ask(
            TranscriptTopics.of("lab-tools").load,
            TranscriptLoad(),
            reply_type=TranscriptState,
            participant_id="p1",
        )
    assert result.response == "Probe 1 code is nominal-1."  # through extract_compacted_tool_result
    held = second.transcript("p1")
    assert held_messages(stored.messages) == held.messages and len(held.messages) == 15 * 4 + 4
    assert held.messages[:60] == first.transcript("p1").messages
    # after system and context
    assert llm.requests[0].messages[2] == ChatMessage("user", "Read probe 1.")


async def test_slash_compact_in_chat_compacts_at_the_tools_destination_over_the_bus() -> None:
    from xrmq.actors.edge.tool_compaction import compact
    from xrmq.actors.tools.control import CompactServer

    front = AgentRuntime(name="front")
    back = AgentRuntime(front.address, name="back")
    agent = tool_agent(
        back,
        session_model(),
        tools=[Tool("probe", "Read a probe.", Probe, probe_reading)],
        compactor=AutoCompactor(enabled=False),
    )
    back.register("lab-tools-compact", CompactServer("lab-tools", agent))
    async with front, back:
        for index in range(1, 15):
            await agent.answer(turn(f"t{index}", f"Read probe {index}."), started=never_started)
        toolcall = await compact(front, "p1", "/compact toolcall", "lab-tools")
        summary = await compact(front, "p1", "/compact summary lab-tools", None)
        unnamed = await compact(front, "p1", "/compact summary", None)
        missing = await compact(front, "p1", "/compact toolcall nowhere", None, timeout=0.5)
    assert toolcall.startswith("xrmq chat: compacted tool results at lab-tools: 2 reclaimed (")
    assert summary.startswith("xrmq chat: summary at lab-tools: compacted (")
    assert unnamed.startswith("xrmq chat: /compact: no destination answered yet")
    assert (
        missing
        == "xrmq chat: /compact: 'nowhere' is not a tools destination (no answer within 0.5 s)"
    )
    assert agent.transcript("p1").summary is not None


async def test_a_barge_in_through_the_router_cancels_the_running_tool_call_at_its_server() -> None:
    from xrmq.actors.routing import SingleDestination
    from xrmq.schemas import Interrupted, UserQuery
    from xrmq.topics import INTERRUPTED_TOPIC, QUERY_TOPIC

    running, cancelled = asyncio.Event(), asyncio.Event()

    async def survey(args: View) -> str:
        running.set()
        try:
            await asyncio.Event().wait()
        finally:
            cancelled.set()
        return "never"

    llm = ScriptedLLM(
        ScriptedResponse("Let me look.", tool_calls=(ToolCall("s1", "lab__survey", "{}"),)),
        "The lab is quiet.",
    )
    context = FakeContext()
    front = AgentRuntime(name="front")
    back = AgentRuntime(front.address, name="back")
    server = serve_tools(back, "lab", [Tool("survey", "Survey the lab.", View, survey)])
    recorder = front.register("recorder", OutputRecorder())
    agent = tool_agent(front, llm, context=context, servers=["lab"])
    front.register(
        "router",
        AgentRouter(
            {"lab-tools": agent},
            SingleDestination(),
            query_topic=QUERY_TOPIC,
            output_topic=VOICE_OUTPUT_TOPIC,
            interrupted_topic=INTERRUPTED_TOPIC,
        ),
    )
    async with front, back:
        front.send(QUERY_TOPIC, UserQuery("Survey the lab.", 1), participant_id="p1")
        await running.wait()
        front.send(INTERRUPTED_TOPIC, Interrupted(), participant_id="p1")
        await asyncio.wait_for(cancelled.wait(), 10)
        await recorder.wait_for(lambda frames: recorder.finals() == 1)  # "Let me look." closed
        front.send(QUERY_TOPIC, UserQuery("Is the lab quiet?", 2), participant_id="p1")
        await recorder.wait_for(lambda frames: recorder.finals() == 2)
    assert server.cancelled == 1
    assert context.log == [("record", "p1", context.log[0][2])]  # only the second turn
    assert context.exchanges["p1"][0][:2] == ("Is the lab quiet?", "The lab is quiet.")
    assert all(m["content"] != "Survey the lab." for m in plain(agent.transcript("p1").messages))


async def test_reasoning_is_written_back_verbatim_in_the_next_request() -> None:
    llm = ScriptedLLM(
        ScriptedResponse(tool_calls=(ToolCall("e1", "echo", "{}"),), reasoning="I should echo."),
        ScriptedResponse("Echoed.", reasoning="Done echoing."),
        "Again.",
    )
    async with AgentRuntime() as runtime:
        agent = tool_agent(
            runtime,
            llm,
            tools=[Tool("echo", "Echo.", View, lambda args: "echo")],
        )
        await agent.answer(turn("t1", "Echo."), started=never_started)
        await agent.answer(turn("t2", "Again?"), started=never_started)
    assistants = [m for m in llm.requests[2].messages if m.role == "assistant"]
    assert [(m.content, m.reasoning) for m in assistants] == [
        ("", "I should echo."),
        ("Echoed.", "Done echoing."),
    ]


async def test_a_summary_the_workers_do_not_deliver_in_time_is_summarize_failed() -> None:
    from xrmq.actors.context import context_plan
    from xrmq.actors.tools.workers import WorkerSummarizer

    runtime = AgentRuntime()  # no compaction worker runs on this bus
    summarizer = runtime.register(
        "tools-summarizer", WorkerSummarizer(context_plan(), timeout_s=0.3)
    )
    async with runtime:
        agent = tool_agent(
            runtime,
            session_model(),
            tools=[Tool("probe", "Read a probe.", Probe, probe_reading)],
            compactor=AutoCompactor(enabled=False),
            summarize=summarizer,
        )
        for index in range(1, 6):
            await agent.answer(turn(f"t{index}", f"Read probe {index}."), started=never_started)
        before = list(agent.transcript("p1").messages)
        outcome = await agent.compact("p1", tier="summary")
    assert isinstance(outcome, SummaryCompactResult)
    assert outcome.status.value == "summarize_failed" and summarizer.failed == 1
    assert agent.transcript("p1").messages == before and agent.transcript("p1").summary is None


async def test_text_of_successive_model_calls_is_one_answer_with_a_word_break() -> None:
    llm = ScriptedLLM(
        ScriptedResponse("Let me look.", tool_calls=(ToolCall("e1", "echo", "{}"),)), "It echoed."
    )
    runtime = AgentRuntime()
    recorder = runtime.register("recorder", OutputRecorder())
    async with runtime:
        agent = tool_agent(
            runtime,
            llm,
            tools=[Tool("echo", "Echo.", View, lambda args: "echo")],
        )
        result = await agent.answer(turn("t1", "Echo."), started=never_started)
        await recorder.wait_for(lambda frames: recorder.finals() == 1)
    assert result.response == "Let me look. It echoed." == recorder.texts("p1")
    assert [
        m["content"] for m in plain(agent.transcript("p1").messages) if m["role"] == "assistant"
    ] == [
        "Let me look.",
        "It echoed.",
    ]
