"""RealtimeSession off the happy path: a boundary that never comes safe, a rollover that
does not relieve the pressure, barge-in truncation, and the compaction workers as the
summarizer; all against the offline realtime server."""

from __future__ import annotations

import asyncio

import pytest
from realtime_helpers import WAIT_S, Recorder, ScriptedEars, silence, tagged_frame

from xrmq.actors.context import context_plan, register_workers
from xrmq.actors.models import OfflineLLM
from xrmq.actors.realtime.checkpoint import heard_part
from xrmq.actors.realtime.openai_realtime import OpenAIRealtime
from xrmq.actors.realtime.pressure import PressurePolicy, RealtimeLimits
from xrmq.actors.realtime.rollover import Phase
from xrmq.actors.realtime.server import Faults, OfflineRealtimeServer
from xrmq.actors.realtime.session import (
    SUMMARY_HEADER,
    RealtimeSession,
    SessionSettings,
    Summarize,
)
from xrmq.actors.runtime import AgentRuntime
from xrmq.actors.tools.summary import llm_summarizer
from xrmq.actors.tools.workers import WorkerSummarizer

pytestmark = pytest.mark.timeout(60)

LLM = OfflineLLM(time_to_first_token_s=0, tokens_per_second=0)
SUMMARIZE = llm_summarizer(LLM, limit_bytes=300)


def _session(
    server: OfflineRealtimeServer,
    recorder: Recorder,
    *,
    limits: RealtimeLimits | None = None,
    instructions: str = "The participant is Ada.",
    summarize: Summarize = SUMMARIZE,
    **settings: object,
) -> RealtimeSession:
    provider = OpenAIRealtime(
        base_url=server.url, limits=limits or RealtimeLimits(), ready_timeout_s=20, silence_ms=200
    )
    options: dict[str, object] = {"keep_tail": 2, "retry_backoff_s": 0.0, "server_vad": False}
    return RealtimeSession(
        provider,
        instructions=lambda: instructions,
        summarize=summarize,
        settings=SessionSettings(**(options | settings)),  # type: ignore[arg-type]
        listener=recorder,
        participant_id="p1",
    )


async def test_a_rollover_waiting_on_an_open_user_turn_gives_up_after_boundary_wait_s() -> None:
    """The participant keeps talking: the session is not cut mid-turn, the rollover is
    given up after ``boundary_wait_s`` (counted), the turn is answered by the same
    session, and the checkpoint is used at the next (natural) disconnect."""
    brain = ScriptedEars(
        ["My badge number is 4417.", "I am still talking about it.", "And one more thing."]
    )
    faults = Faults()
    async with OfflineRealtimeServer(brain=brain, faults=faults) as server:
        recorder = Recorder()
        session = _session(server, recorder, server_vad=True, boundary_wait_s=0.3, keep_tail=0)
        async with asyncio.timeout(WAIT_S):
            await session.start()
            for seq in range(10):
                await session.send_audio(tagged_frame(seq), seq)
            await session.send_audio(silence(0.4), 10)  # the server's VAD ends the turn
            await recorder.wait_answers(1)
            for seq in range(11, 16):  # a new turn starts and does not end
                await session.send_audio(tagged_frame(seq), seq)
            await session.wait_for(lambda: session.machine.boundary.user_turn_open)
            await session.request_rollover("test")
            assert session.machine.scheduled == "test"  # waiting for the user turn
            await session.wait_for(lambda: session.counts["boundary_timeouts"] == 1)
            assert session.machine.scheduled is None and session.phase is Phase.STREAMING
            assert session.epoch == 1 and session.counts["rollovers"] == 0
            await session.send_audio(silence(0.4), 16)  # the turn ends: the same session answers
            done = await recorder.wait_answers(2)
            assert done[1][0] == "I am still talking about it." and session.epoch == 1
            faults.drop_mid_response = 1  # the provider's own disconnect, in the next response
            for seq in range(17, 22):
                await session.send_audio(tagged_frame(seq), seq)
            await session.send_audio(silence(0.4), 22)
            await session.wait_streaming(2)
        await session.close()
    assert session.counts["reconnects"] == 1
    # the checkpoint, at the natural disconnect
    assert SUMMARY_HEADER in server.instructions[1] and "4417" in server.instructions[1]


async def test_a_rollover_whose_seed_stays_over_rollover_at_shrinks_the_tail_then_stops() -> None:
    """Instructions alone over the threshold: every new session would roll over again
    after one answer. Each such rollover is counted and keeps half the tail; after two in
    a row proactive rollover stops, and later answers roll over no more."""
    limit = 400
    instructions = "Ada's standing notes. " + "The lab keeps its notes here. " * 45
    async with OfflineRealtimeServer(brain=ScriptedEars()) as server:
        recorder = Recorder()
        session = _session(
            server,
            recorder,
            limits=RealtimeLimits(max_context_tokens=limit),
            instructions=instructions,
            keep_tail=4,
        )
        await session.start()
        assert session.pressure() >= PressurePolicy().rollover_at  # the seed alone
        for seq in range(8):
            await recorder.ask(session, f"Note {seq}: shelf {seq} holds box {seq}.", seq)
            await session.wait_for(lambda: session.phase is Phase.STREAMING)
        await session.close()
    assert session.counts["ineffective_rollovers"] == 2
    assert session.counts["rollover_loop_stopped"] == 1 and session.machine.policy == "natural"
    assert session.counts["rollovers"] == 2  # and no more after the loop stopped
    assert session.checkpointer.keep_tail == 1  # 4 -> 2 -> 1
    assert session.counts["deferred_to_disconnect"] >= 1


async def test_a_rollover_that_relieves_the_pressure_is_not_counted_ineffective() -> None:
    limit = 400
    async with OfflineRealtimeServer(brain=ScriptedEars()) as server:
        recorder = Recorder()
        session = _session(server, recorder, limits=RealtimeLimits(max_context_tokens=limit))
        await session.start()
        for seq in range(30):
            await recorder.ask(session, f"Note {seq}: shelf {seq} holds box {seq}.", seq)
        await session.close()
    assert session.counts["rollovers"] >= 1
    assert session.counts["ineffective_rollovers"] == 0 and session.machine.policy == "proactive"


async def test_truncate_cuts_the_assistant_item_to_the_audio_heard_on_the_server_and_here() -> None:
    brain = ScriptedEars(speech_s=2.0)
    async with OfflineRealtimeServer(brain=brain) as server:
        recorder = Recorder()
        session = _session(server, recorder)
        await session.start()
        answer = await recorder.ask(session, "My badge number is 4417 and my desk is 12.", 1)
        response_id = recorder.done[0][1].response_id
        assert len(answer.split()) >= 4
        await session.truncate(response_id, 1000)  # half of its 2 s was heard
        await session.wait_for(lambda: session.counts["items_truncated"] == 1)
        heard = heard_part(answer, 1000, 2000)
        assistant = [m.text for m in session.transcript.messages if m.role == "assistant"]
        next_answer = await recorder.ask(session, "Go on.", 2)
        await session.close()
    ((_, end, kept),) = server.truncations
    assert (end, kept) == (1000, heard) and 0 < len(heard.split()) < len(answer.split())
    assert assistant == [heard]  # the transcript the checkpoint summarizes: what was heard
    assert next_answer is not None and session.counts["truncated_responses"] == 1


async def test_truncate_beyond_the_audio_received_is_clamped_to_it() -> None:
    async with OfflineRealtimeServer(brain=ScriptedEars(speech_s=0.5)) as server:
        recorder = Recorder()
        session = _session(server, recorder)
        await session.start()
        answer = await recorder.ask(session, "Tell me about the lab.", 1)
        await session.truncate(recorder.done[0][1].response_id, 60_000)
        await session.wait_for(lambda: session.counts["items_truncated"] == 1)
        await session.close()
    ((_, end, kept),) = server.truncations
    assert end == 500 and kept == answer  # all of it was heard
    assert server.stats.get("error.invalid_value", 0) == 0


async def test_checkpoints_are_summarized_by_the_compaction_workers() -> None:
    """WorkerSummarizer (the compaction-worker pool, real worker actors on the offline
    model) as a realtime session's summarizer: the session rolls over seeded with their
    summary and still answers the first fact."""
    plan = context_plan(compaction_workers=2)
    runtime = AgentRuntime()
    register_workers(runtime, plan, LLM)
    summarizer = runtime.register("summarizer", WorkerSummarizer(plan, timeout_s=10))
    limit = 400
    async with runtime, OfflineRealtimeServer(brain=ScriptedEars()) as server:
        recorder = Recorder()
        session = _session(
            server, recorder, limits=RealtimeLimits(max_context_tokens=limit), summarize=summarizer
        )
        await session.start()
        facts = ["My badge number is 4417.", "I parked on level 3.", "My sister lives in Lyon."]
        notes = [f"Note {n}: shelf {n} holds box {n}." for n in range(24)]
        for seq, text in enumerate(facts + notes):
            await recorder.ask(session, text, seq)
        answer = await recorder.ask(session, "What is my badge number?", 99)
        await session.close()
    assert session.counts["rollovers"] >= 1 and summarizer.failed == 0
    seeded = [text for text in server.instructions[1:] if SUMMARY_HEADER in text]
    assert seeded and "4417" in seeded[-1]
    assert "4417" in answer and server.stats["truncated_items"] == 0
