"""RealtimeSession against the offline realtime server: rollover, backlog, epochs, fallback."""

from __future__ import annotations

import asyncio

import pytest
from realtime_helpers import WAIT_S, Recorder, ScriptedEars, frame_tags, tagged_frame

from xrmq.actors.models import OfflineLLM
from xrmq.actors.realtime.openai_realtime import OpenAIRealtime
from xrmq.actors.realtime.pressure import RealtimeLimits
from xrmq.actors.realtime.rollover import MachineSettings, Phase
from xrmq.actors.realtime.server import Faults, OfflineRealtimeServer, ServerSettings
from xrmq.actors.realtime.session import (
    SUMMARY_HEADER,
    RealtimeSession,
    SessionSettings,
    Summarize,
)
from xrmq.actors.tools.summary import llm_summarizer

SUMMARIZE = llm_summarizer(
    OfflineLLM(time_to_first_token_s=0, tokens_per_second=0), limit_bytes=300
)


def _session(
    server: OfflineRealtimeServer,
    *,
    limits: RealtimeLimits | None = None,
    proactive: bool = True,
    machine: MachineSettings | None = None,
    recorder: Recorder | None = None,
    keep_tail: int = 2,
    summarize: Summarize = SUMMARIZE,
) -> RealtimeSession:
    provider = OpenAIRealtime(
        base_url=server.url,
        limits=limits or RealtimeLimits(),
        proactive_rollover=proactive,
        ready_timeout_s=20,
    )
    settings = SessionSettings(
        machine=machine or MachineSettings(),
        keep_tail=keep_tail,
        retry_backoff_s=0.0,
        server_vad=False,
    )
    return RealtimeSession(
        provider,
        instructions=lambda: "The participant is Ada.",
        summarize=summarize,
        settings=settings,
        listener=recorder,
        participant_id="p1",
    )


async def test_pressure_rolls_the_session_over_before_the_provider_truncates_anything() -> None:
    limit = 400
    settings = ServerSettings(max_context_tokens=limit)
    async with OfflineRealtimeServer(settings, brain=ScriptedEars()) as server:
        recorder = Recorder()
        session = _session(
            server, limits=RealtimeLimits(max_context_tokens=limit), recorder=recorder
        )
        await session.start()
        facts = [
            "My badge number is 4417.",
            "The spare key is in the blue drawer.",
            "My cat is called Tom.",
            "I parked on level 3.",
            "My sister lives in Lyon.",
            "The router password is on the fridge.",
            "My dentist is Dr. Okafor.",
            "The printer is in room 12.",
            "My flight leaves at nine.",
            "The plant needs water on Fridays.",
        ]
        for seq, fact in enumerate(facts * 3):
            await recorder.ask(session, fact, seq)
        answer = await recorder.ask(session, "What is my badge number?", 99)
        await session.close()
    assert session.counts["rollovers"] >= 2
    assert server.stats["truncated_items"] == 0 and server.stats["limit_closes"] == 0
    assert "4417" in answer
    assert any(SUMMARY_HEADER in text for text in server.instructions[1:])
    record = session.rollovers[-1]
    assert record.connect_s >= 0 and record.reason == "rollover"


async def test_settled_returns_only_after_the_checkpoint_a_response_started_is_committed() -> None:
    """A response over ``compress_at`` starts a checkpoint in the background; ``settled()``
    waits for it (and for a rollover it requested), so a caller can take the next turn
    with the checkpoint sequence fixed instead of depending on the summarizer's speed."""
    gate, entered, order = asyncio.Event(), asyncio.Event(), []

    async def held(head, previous):  # the first summary waits for the gate
        entered.set()
        await gate.wait()
        summary = await SUMMARIZE(head, previous)
        order.append("summarized")
        return summary

    limit = 400
    async with OfflineRealtimeServer(
        ServerSettings(max_context_tokens=limit), brain=ScriptedEars()
    ) as server:
        recorder = Recorder()
        session = _session(
            server,
            limits=RealtimeLimits(max_context_tokens=limit),
            recorder=recorder,
            summarize=held,
        )
        await session.start()
        await session.settled()  # nothing started yet: settled at once
        seq = 0
        while session.pressure() < session.settings.pressure.compress_at:
            await recorder.ask(session, f"Note {seq}: shelf {seq} holds box {seq}.", seq)
            seq += 1
        async with asyncio.timeout(WAIT_S):
            await entered.wait()  # that response's end started the checkpoint
        settling = asyncio.ensure_future(session.settled())
        asyncio.get_running_loop().call_soon(gate.set)  # after settled() took its first step
        async with asyncio.timeout(WAIT_S):
            await settling
        order.append("settled")
        committed, phase = session.checkpointer.committed, session.phase
        scheduled = session.machine.scheduled
        await session.close()
    assert order == ["summarized", "settled"]
    assert committed == 1 and phase is Phase.STREAMING and scheduled is None


async def test_without_rollover_the_same_session_loses_its_first_facts_to_truncation() -> None:
    """The control: the provider limit is real, so the figure above means something."""
    limit = 260
    async with OfflineRealtimeServer(
        ServerSettings(max_context_tokens=limit), brain=ScriptedEars()
    ) as server:
        recorder = Recorder()
        session = _session(server, limits=RealtimeLimits(), recorder=recorder)  # declares no limit
        await session.start()
        for seq, fact in enumerate(
            ["My badge number is 4417."]
            + [f"Note {n}: the shelf {n} holds box {n}." for n in range(12)]
        ):
            await recorder.ask(session, fact, seq)
        answer = await recorder.ask(session, "What is my badge number?", 99)
        await session.close()
    assert server.stats["truncated_items"] > 0 and "4417" not in answer


async def test_audio_arriving_during_a_rollover_is_buffered_and_replayed_in_order() -> None:
    brain = ScriptedEars(["first turn", "second turn"])
    faults = Faults()
    async with OfflineRealtimeServer(brain=brain, faults=faults) as server:
        recorder = Recorder()
        session = _session(server, recorder=recorder)
        async with asyncio.timeout(WAIT_S):
            await session.start()
        for seq in range(5):
            await session.send_audio(tagged_frame(seq), seq)
        await session.commit(5)
        await recorder.wait_answers(1)
        faults.hold = asyncio.Event()  # the next session's connect stays open until released
        await session.request_rollover("test")
        assert session.phase is Phase.ROLLING
        for seq in range(6, 45):
            await session.send_audio(tagged_frame(seq), seq)
        await session.commit(45)
        assert len(session.machine.backlog) == 40
        faults.hold.set()
        await recorder.wait_answers(2)
        await session.close()
    assert frame_tags(brain.heard[1]) == list(range(6, 45))  # 39/39 frames, in order
    assert session.counts["replayed"] == 40 and session.counts["overflow"] == 0
    assert session.rollovers[-1].backlog == 40


async def test_a_full_backlog_overflows_explicitly_by_its_policy() -> None:
    faults = Faults()
    brain = ScriptedEars(["a"])
    async with OfflineRealtimeServer(brain=brain, faults=faults) as server:
        recorder = Recorder()
        session = _session(
            server,
            recorder=recorder,
            machine=MachineSettings(backlog_items=10, overflow="drop_oldest"),
        )
        await session.start()
        faults.hold = asyncio.Event()
        await session.request_rollover("test")
        for seq in range(15):
            await session.send_audio(tagged_frame(seq), seq)
        await session.commit(15)
        faults.hold.set()
        await recorder.wait_answers(1)
        await session.close()
    assert session.counts["overflow"] == 6
    assert frame_tags(brain.heard[0]) == list(range(6, 15))  # the oldest went, the rest in order


async def test_late_events_of_the_old_session_are_dropped_and_counted() -> None:
    brain = ScriptedEars()
    faults = Faults(late_events=True)
    async with OfflineRealtimeServer(brain=brain, faults=faults) as server:
        recorder = Recorder()
        session = _session(server, recorder=recorder)
        async with asyncio.timeout(WAIT_S):
            await session.start()
        brain.release = asyncio.Event()
        await session.send_text("My badge number is 4417.", 1)
        await session.request_rollover("test")  # scheduled: the response is in progress
        assert session.phase is Phase.STREAMING and session.machine.scheduled == "test"
        brain.release.set()
        await recorder.wait_answers(1)
        faults.late_events = False  # the old session's late events were sent already
        answer = await recorder.ask(session, "What is my badge number?", 2)
        await session.close()
    # The old session's duplicate response.done and error came after it was replaced.
    assert session.counts["stale_events"] >= 2
    assert len(recorder.done) == 2 and "4417" in answer
    assert session.counts["rollovers"] == 1 and session.counts["provider_errors"] == 0


async def test_an_unexpected_disconnect_reconnects_with_the_latest_checkpoint() -> None:
    brain = ScriptedEars()
    faults = Faults()
    async with OfflineRealtimeServer(brain=brain, faults=faults) as server:
        recorder = Recorder()
        session = _session(server, recorder=recorder)
        async with asyncio.timeout(WAIT_S):
            await session.start()
        await recorder.ask(session, "My badge number is 4417.", 1)
        faults.drop_mid_response = 1
        await session.send_text("I parked on level 3.", 2)
        async with asyncio.timeout(WAIT_S):
            await session.wait_streaming(2)
        answer = await recorder.ask(session, "What is my badge number?", 3)
        await session.close()
    assert server.stats["dropped_mid_response"] == 1 and "4417" in answer
    assert server.seeded_items[-1][:1] == [("user", "My badge number is 4417.")]


async def test_a_failed_proactive_reconnect_retries_and_falls_back_to_natural() -> None:
    faults = Faults()
    async with OfflineRealtimeServer(brain=ScriptedEars(), faults=faults) as server:
        recorder = Recorder()
        session = _session(server, recorder=recorder)
        async with asyncio.timeout(WAIT_S):
            await session.start()
        await recorder.ask(session, "My badge number is 4417.", 1)
        faults.refuse_connects = 1
        await session.request_rollover("test")
        answer = await recorder.ask(session, "What is my badge number?", 2)
        await session.request_rollover("again")
        await session.close()
    assert session.counts["connect_failures"] == 1 and session.counts["fallbacks"] == 1
    assert session.machine.policy == "natural" and session.counts["deferred_to_disconnect"] == 1
    assert "4417" in answer


async def test_a_provider_without_proactive_rollover_uses_the_checkpoint_at_next_disconnect() -> (
    None
):
    faults = Faults()
    async with OfflineRealtimeServer(brain=ScriptedEars(), faults=faults) as server:
        recorder = Recorder()
        session = _session(server, recorder=recorder, proactive=False, keep_tail=0)
        await session.start()
        for seq, fact in enumerate(["My badge number is 4417.", "I parked on level 3."]):
            await recorder.ask(session, fact, seq)
        await session.request_rollover("pressure")
        assert session.epoch == 1 and session.checkpointer.latest is not None
        faults.drop_mid_response = 1
        await session.send_text("My cat is called Tom.", 5)
        async with asyncio.timeout(WAIT_S):
            await session.wait_streaming(2)
        answer = await recorder.ask(session, "What is my badge number?", 6)
        await session.close()
    assert session.counts["deferred_to_disconnect"] == 1 and session.counts["reconnects"] == 1
    assert SUMMARY_HEADER in server.instructions[-1] and "4417" in answer


async def test_when_every_connect_fails_the_session_says_so() -> None:
    async with OfflineRealtimeServer(
        brain=ScriptedEars(), faults=Faults(refuse_connects=5)
    ) as server:
        session = _session(server, machine=MachineSettings(connect_attempts=2))
        with pytest.raises(Exception, match="connect attempts failed"):
            await session.start()
        await session.close()
    assert session.phase is Phase.CLOSED and session.counts["connect_failures"] == 2


async def test_a_lifetime_reconnect_at_low_pressure_reseeds_the_dialogue_verbatim() -> None:
    """Seed 003: "Session duration should help schedule a reconnect, but does not by
    itself imply that the content needs summarization." A session reconnecting for its
    lifetime (``max_session_s``) below ``compress_at`` makes no summary call, and the new
    session holds the whole dialogue word for word."""
    now = [0.0]
    calls: list[int] = []

    async def counting(head, previous):
        calls.append(len(head))
        return await SUMMARIZE(head, previous)

    async with OfflineRealtimeServer(brain=ScriptedEars()) as server:
        recorder = Recorder()
        provider = OpenAIRealtime(
            base_url=server.url,
            limits=RealtimeLimits(max_context_tokens=100_000, max_session_s=600),
            ready_timeout_s=20,
        )
        session = RealtimeSession(
            provider,
            instructions=lambda: "The participant is Ada.",
            summarize=counting,
            settings=SessionSettings(keep_tail=2, retry_backoff_s=0.0, server_vad=False),
            listener=recorder,
            participant_id="p1",
            clock=lambda: now[0],
        )
        await session.start()
        facts = ["My badge number is 4417.", "I parked on level 3.", "My cat is called Tom."]
        for seq, fact in enumerate(facts[:-1]):
            await recorder.ask(session, fact, seq)
        now[0] = 600.0  # the session's lifetime is over: the next response schedules a reconnect
        await recorder.ask(session, facts[-1], 5)
        async with asyncio.timeout(WAIT_S):
            await session.settled()
        pressure = session.pressure()
        dialogue = [(role, text) for role, text in server.seeded_items[-1]]
        answers = [done.text for _, done in recorder.done]
        await session.close()
    assert pressure < session.settings.pressure.compress_at
    assert session.counts["rollovers"] == 1 and len(server.instructions) == 2
    assert calls == [] and session.checkpointer.latest is None
    assert SUMMARY_HEADER not in server.instructions[-1]
    expected = [
        item
        for fact, answer in zip(facts, answers)
        for item in (("user", fact), ("assistant", answer))
    ]
    assert dialogue == expected
