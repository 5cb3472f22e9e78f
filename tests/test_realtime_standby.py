"""Make before break: the standby session a rollover switches to, against the offline server.

The standby is opened before the boundary, seeded with the checkpoint and kept up to
date; the switch routes input to it with no connect on the path. Where it cannot be
(a provider that allows one session at once, a standby that fails, drops, expires or
holds a message that changed), the rollover takes the reconnect path, counted.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

from realtime_helpers import WAIT_S, Recorder, ScriptedEars, frame_tags, tagged_frame

from xrmq.actors.models import OfflineLLM
from xrmq.actors.realtime.openai_realtime import OpenAIRealtime
from xrmq.actors.realtime.pressure import PressurePolicy, RealtimeLimits
from xrmq.actors.realtime.rollover import Phase
from xrmq.actors.realtime.server import Faults, OfflineRealtimeServer, ServerSettings
from xrmq.actors.realtime.session import SUMMARY_HEADER, RealtimeSession, SessionSettings
from xrmq.actors.tools.summary import llm_summarizer

SUMMARIZE = llm_summarizer(
    OfflineLLM(time_to_first_token_s=0, tokens_per_second=0), limit_bytes=300
)
NEVER = PressurePolicy(compress_at=1.0, rollover_at=1.0)
"""Pressure that never prepares or rolls over by itself: the tests ask for both."""
FACTS = ("My badge number is 4417.", "The spare key is in the blue drawer.", "I parked on 3.")


def _session(
    server: OfflineRealtimeServer,
    recorder: Recorder,
    *,
    concurrent: int = 2,
    idle_s: float | None = None,
    pressure: PressurePolicy = NEVER,
    limits: RealtimeLimits | None = None,
) -> RealtimeSession:
    provider = OpenAIRealtime(
        base_url=server.url,
        limits=limits or RealtimeLimits(),
        ready_timeout_s=20,
        max_concurrent_sessions=concurrent,
        standby_idle_s=idle_s,
    )
    settings = SessionSettings(
        keep_tail=2, retry_backoff_s=0.0, server_vad=False, pressure=pressure
    )
    return RealtimeSession(
        provider,
        instructions=lambda: "The participant is Ada.",
        summarize=SUMMARIZE,
        settings=settings,
        listener=recorder,
        participant_id="p1",
    )


async def _until(session: RealtimeSession, state: str) -> None:
    async with asyncio.timeout(WAIT_S):
        await session.wait_for(lambda: session.standby.state == state)


@asynccontextmanager
async def _started(
    server: OfflineRealtimeServer, facts: tuple[str, ...] = FACTS[:1], **options: Any
) -> AsyncIterator[tuple[RealtimeSession, Recorder]]:
    """A session on ``server`` (``_session``'s ``options``), started and told ``facts``;
    closed at the end of the block."""
    recorder = Recorder()
    session = _session(server, recorder, **options)
    await session.start()
    for seq, fact in enumerate(facts, 1):
        await recorder.ask(session, fact, seq)
    yield session, recorder
    await session.close()


async def _roll_over_and_ask(session: RealtimeSession, recorder: Recorder) -> str:
    """Roll over now, then the answer to a question only the first fact answers."""
    await session.request_rollover("test")
    return await recorder.ask(session, "What is my badge number?", 5)


async def test_the_standby_holds_summary_tail_and_every_later_message_at_the_switch() -> None:
    faults = Faults()
    async with OfflineRealtimeServer(brain=ScriptedEars(), faults=faults) as server:
        async with _started(server, facts=FACTS) as (session, recorder):
            faults.hold = asyncio.Event()  # the standby's connect stays open until released
            session.standby.prepare()
            async with asyncio.timeout(WAIT_S):
                await session.wait_for(lambda: session.standby.seeded)
            assert session.standby.state == "connecting"
            assert session.checkpointer.latest is not None and session.checkpointer.latest.summary
            await recorder.ask(session, "My cat is called Tom.", 10)  # while it connects
            faults.hold.set()
            await _until(session, "ready")
            await recorder.ask(session, "My sister lives in Lyon.", 11)  # while it waits
            recovered = session.checkpointer.recovered()
            expected = [(message.role, message.text) for message in recovered.messages]
            await session.request_rollover("test")
            standby = list(server.seeded_items[1])  # the server's second session, at the switch
            answer = await recorder.ask(session, "Where does my sister live?", 12)
    assert standby == expected
    assert ("user", "My cat is called Tom.") in standby[-4:]
    assert standby[-2:][0] == ("user", "My sister lives in Lyon.")
    assert f"{SUMMARY_HEADER}\n{recovered.summary}" in server.instructions[1]
    assert session.counts["standby_switches"] == 1 and session.counts["standby_items_added"] == 4
    assert server.stats["sessions"] == 2 and session.epoch == 2 and "Lyon" in answer


async def test_a_short_utterance_after_the_boundary_is_answered_by_the_standby_in_order() -> None:
    brain = ScriptedEars(["first", "yes"])
    faults = Faults()
    async with OfflineRealtimeServer(brain=brain, faults=faults) as server:
        async with _started(server) as (session, recorder):
            session.standby.prepare()
            await _until(session, "ready")
            faults.hold = asyncio.Event()  # never set: a connect now would never be ready

            async def speak() -> None:  # 0.3 s: 15 frames of 20 ms, starting with the switch
                for seq in range(100, 115):
                    await session.send_audio(tagged_frame(seq), seq)
                await session.commit(115)

            async with asyncio.timeout(WAIT_S):
                await asyncio.gather(session.request_rollover("test"), speak())
                await recorder.wait_answers(2)
    assert frame_tags(brain.heard[-1]) == list(range(100, 115))  # once each, in order
    assert server.stats["sessions"] == 2  # no connect after the boundary
    assert session.counts["standby_switches"] == 1 and session.counts["rollovers"] == 1
    assert session.counts["standby_fallbacks"] == 0 and session.epoch == 2
    assert session.standby.last_switch_s is not None and session.rollovers[-1].handshake_s < 0.5


async def test_pressure_past_prepare_at_opens_the_standby_once_a_checkpoint_is_ready() -> None:
    async with OfflineRealtimeServer(brain=ScriptedEars()) as server:
        policy = PressurePolicy(compress_at=0.01, prepare_at=0.02, rollover_at=1.0)
        async with _started(
            server, facts=FACTS, pressure=policy, limits=RealtimeLimits(max_context_tokens=1_000)
        ) as (session, _):
            await _until(session, "ready")
            assert session.checkpointer.committed >= 1 and session.counts["standby_opens"] == 1
    assert session.standby.state == "closed" and server.stats["sessions"] == 2


async def test_a_provider_with_one_session_at_once_rolls_over_by_reconnecting() -> None:
    async with OfflineRealtimeServer(brain=ScriptedEars()) as server:
        async with _started(server, concurrent=1) as (session, recorder):
            session.standby.prepare()
            answer = await _roll_over_and_ask(session, recorder)
    assert session.standby.state == "closed" and session.counts["standby_opens"] == 0
    assert session.counts["standby_fallbacks"] == 1 and session.counts["rollovers"] == 1
    assert "4417" in answer


async def test_a_standby_that_cannot_connect_is_abandoned_for_the_reconnect_path() -> None:
    # The provider claims two sessions, the server allows one: every standby is refused.
    settings = ServerSettings(max_concurrent_sessions=1)
    async with OfflineRealtimeServer(settings, brain=ScriptedEars()) as server:
        async with _started(server) as (session, recorder):
            session.standby.prepare()
            await _until(session, "abandoned")
            answer = await _roll_over_and_ask(session, recorder)
    assert session.counts["standby_connect_failures"] == 3
    assert session.counts["standby_abandoned"] == 1 and session.counts["standby_fallbacks"] == 1
    assert server.stats["concurrency_refused"] >= 3 and session.counts["rollovers"] == 1
    assert "4417" in answer


async def test_a_standby_that_drops_while_waiting_is_reopened_and_switched_to() -> None:
    async with OfflineRealtimeServer(brain=ScriptedEars()) as server:
        async with _started(server) as (session, recorder):
            session.standby.prepare()
            await _until(session, "ready")
            assert server.drop_session(2)
            async with asyncio.timeout(WAIT_S):
                await session.wait_for(lambda: session.counts["standby_ready"] == 2)
            answer = await _roll_over_and_ask(session, recorder)
    assert session.counts["standby_dropped"] == 1 and session.counts["standby_reopens"] == 1
    assert session.counts["standby_switches"] == 1 and server.stats["sessions"] == 3
    assert "4417" in answer


async def test_a_standby_near_its_idle_limit_is_reopened_then_abandoned() -> None:
    async with OfflineRealtimeServer(brain=ScriptedEars()) as server:
        async with _started(server, idle_s=0.05) as (session, recorder):
            session.standby.prepare()
            await _until(session, "abandoned")
            answer = await _roll_over_and_ask(session, recorder)
    assert session.counts["standby_expired"] == 3 and session.counts["standby_reopens"] == 2
    assert session.counts["standby_fallbacks"] == 1 and "4417" in answer


async def test_a_message_changed_after_seeding_discards_the_standby() -> None:
    brain = ScriptedEars(speech_s=1.0)
    faults = Faults()
    async with OfflineRealtimeServer(brain=brain, faults=faults) as server:
        async with _started(server, facts=FACTS[:2]) as (session, recorder):
            session.standby.prepare()
            await _until(session, "ready")
            faults.hold = asyncio.Event()  # the reopened standby cannot be ready in time
            cut = recorder.done[-1][1]
            await session.truncate(cut.response_id, 0)  # a barge-in: nothing of it was heard
            assert session.counts["standby_invalidated"] == 1
            assert session.standby.state == "connecting"  # reopened from the cut transcript
            await session.request_rollover("test")
            faults.hold.set()
            answer = await recorder.ask(session, "What is my badge number?", 5)
    assert session.counts["standby_invalidated"] == 1
    assert session.counts["standby_fallbacks"] == 1 and session.counts["standby_switches"] == 0
    heard = [text for role, text in server.seeded_items[-1] if role == "assistant"]
    assert cut.text not in heard and "4417" in answer


async def test_the_switch_waits_for_a_safe_boundary_and_drops_old_epoch_events() -> None:
    brain = ScriptedEars()
    faults = Faults(late_events=True)
    async with OfflineRealtimeServer(brain=brain, faults=faults) as server:
        async with _started(server, facts=()) as (session, recorder):
            session.standby.prepare()
            await _until(session, "ready")
            brain.release = asyncio.Event()
            await session.send_text("My badge number is 4417.", 1)
            await session.request_rollover("test")  # scheduled: the response is in progress
            assert session.phase is Phase.STREAMING and session.machine.scheduled == "test"
            assert session.counts["standby_switches"] == 0 and session.epoch == 1
            brain.release.set()
            await recorder.wait_answers(1)
            faults.late_events = False  # the old session's late events were sent already
            answer = await recorder.ask(session, "What is my badge number?", 2)
    assert session.counts["standby_switches"] == 1 and session.counts["stale_events"] >= 2
    assert session.counts["provider_errors"] == 0 and "4417" in answer
