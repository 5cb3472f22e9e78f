"""The standby's pure parts (what it holds, the switch's effects, ``prepare_at``), the
offline server's session limits and ``xrmq top``'s standby line."""

from __future__ import annotations

import asyncio

import pytest
from realtime_helpers import WAIT_S, ScriptedEars, until

from xrmq.actors.realtime.checkpoint import Checkpointer, LiveTranscript
from xrmq.actors.realtime.mirror import StandbyMirror
from xrmq.actors.realtime.openai_realtime import OpenAIRealtime
from xrmq.actors.realtime.pressure import PressurePolicy, PressureTracker, RealtimeLimits
from xrmq.actors.realtime.provider import (
    Disconnected,
    ProviderError,
    RealtimeConnectError,
    RealtimeEvent,
    SessionSeed,
)
from xrmq.actors.realtime.rollover import Close, Connect, RolloverMachine
from xrmq.actors.realtime.server import OfflineRealtimeServer, ServerSettings


def _transcript(*texts: str) -> LiveTranscript:
    transcript = LiveTranscript()
    for index, text in enumerate(texts):
        transcript.append("user" if index % 2 == 0 else "assistant", text)
    return transcript


def test_the_mirror_is_seeded_with_the_completed_messages_after_the_summary() -> None:
    transcript = _transcript("a", "b", "c", "d")
    checkpointer = Checkpointer(transcript, keep_tail=2)
    checkpointer.commit(checkpointer.begin(), "summary of a b")
    streaming = transcript.append("user", "e", complete=False)
    transcript.append("assistant", "f")
    mirror = StandbyMirror.seed(checkpointer)
    assert mirror.summary == "summary of a b"
    assert [m.text for m in mirror.held] == ["c", "d"] and mirror.through == 4
    assert mirror.pending(transcript.messages)[0] == []  # e is not complete: f waits too
    transcript.replace(streaming, "e")
    new, through = mirror.pending(transcript.messages)
    assert [m.text for m in new] == ["e", "f"] and through == 6


def test_the_mirror_sees_a_held_message_that_changed_but_not_one_summarized_away() -> None:
    transcript = _transcript("a", "b", "c", "d")
    checkpointer = Checkpointer(transcript, keep_tail=4)
    mirror = StandbyMirror.seed(checkpointer)
    transcript.drop_through(2)  # a later checkpoint's summary covers a and b
    assert not mirror.changed(transcript.messages, summarized_through=2)
    transcript.replace(4, "d, cut by a barge-in")
    assert mirror.changed(transcript.messages, summarized_through=2)
    merged = StandbyMirror.seed(Checkpointer(_transcript("a", "b", "c"), keep_tail=4))
    live = _transcript("a", "b", "c")
    live.merge(1, 3)
    assert merged.changed(live.messages, summarized_through=0)


def test_a_rollover_with_a_ready_standby_connects_it_first_then_closes_the_old() -> None:
    machine = RolloverMachine()
    machine.start()
    machine.ready(1)
    machine.standby_ready = True
    assert machine.request_rollover("pressure") == [Connect(2, "standby"), Close(1)]
    assert not machine.standby_ready
    machine.ready(2)
    assert machine.request_rollover("again") == [Close(2), Connect(3, "rollover")]


def test_prepare_at_lies_between_compress_at_and_rollover_at() -> None:
    tracker = PressureTracker(RealtimeLimits(max_context_tokens=100), PressurePolicy(0.6, 0.8))
    assert tracker.prepare_threshold == pytest.approx(0.7)
    tracker.add_transcript("x" * 4 * 69)
    assert tracker.should_compress() and not tracker.should_prepare()
    tracker.add_transcript("x" * 4)
    assert tracker.should_prepare() and not tracker.should_rollover()
    with pytest.raises(ValueError, match=r"PressurePolicy.prepare_at: must be between"):
        PressurePolicy(compress_at=0.6, rollover_at=0.8, prepare_at=0.9)


async def test_the_offline_server_refuses_a_session_over_its_concurrent_limit() -> None:
    settings = ServerSettings(max_concurrent_sessions=2)
    async with OfflineRealtimeServer(settings, brain=ScriptedEars()) as server:
        provider = OpenAIRealtime(base_url=server.url, ready_timeout_s=20)
        first = await provider.connect(SessionSeed("one"))
        second = await provider.connect(SessionSeed("two"))
        with pytest.raises(RealtimeConnectError, match="session_limit"):
            await provider.connect(SessionSeed("three"))
        await first.close()
        await second.close()
    assert server.stats["concurrency_refused"] == 1 and server.stats["sessions"] == 2


async def test_the_offline_server_closes_a_session_that_stays_idle() -> None:
    settings = ServerSettings(idle_timeout_s=0.05)
    async with OfflineRealtimeServer(settings, brain=ScriptedEars()) as server:
        provider = OpenAIRealtime(base_url=server.url, ready_timeout_s=20)
        connection = await provider.connect(SessionSeed("idle"))
        events: list[RealtimeEvent] = []
        async with asyncio.timeout(WAIT_S):
            await until(connection, Disconnected, events)
    assert ProviderError("session_idle_timeout", "nothing received for 0.05 s") in events
    assert server.stats["idle_closes"] == 1


def test_top_shows_the_standby_state_and_the_last_switch_duration() -> None:
    from xrmq.actors.edge.top import _realtime_lines

    lines = _realtime_lines(
        "alice",
        {"epoch": 3.0, "standby_switches": 2.0, "standby_state": 3.0, "standby_switch_ms": 1.4},
    )
    assert lines == [
        "  realtime alice: epoch 3  switches 2",
        "    standby ready, last switch 1.4 ms",
    ]
    lines = _realtime_lines("bob", {"epoch": 1.0, "standby_state": 0.0})
    assert lines[1] == "    standby unsupported"


def test_top_names_the_standby_states_as_the_standby_does() -> None:
    from xrmq.actors.edge.top import STANDBY_STATES
    from xrmq.actors.realtime.standby import STATES

    assert STANDBY_STATES == STATES


def test_the_realtime_table_configures_the_standby_for_either_provider() -> None:
    from xrmq.actors.edge.realtime_destination import realtime_provider, realtime_settings
    from xrmq.actors.realtime.config import RealtimeConfig, realtime_problem
    from xrmq.actors.realtime.offline_provider import OfflineRealtimeProvider

    offline = RealtimeConfig(prepare_at=0.8, max_concurrent_sessions=3, idle_s=60.0)
    assert realtime_problem(offline) is None
    assert realtime_settings(offline).pressure.prepare_at == 0.8
    provider = realtime_provider(offline)
    assert isinstance(provider, OfflineRealtimeProvider)
    assert (provider.max_concurrent_sessions, provider.standby_idle_s) == (3, 60.0)
    assert provider.server.settings.idle_timeout_s == 60.0
    assert realtime_provider(RealtimeConfig()).max_concurrent_sessions == 2  # no server limit
    remote = realtime_provider(RealtimeConfig(provider="openai", api_key_env="HOME"))
    assert (remote.max_concurrent_sessions, remote.standby_idle_s) == (1, None)
    field, rule = realtime_problem(RealtimeConfig(prepare_at=0.9)) or ("", "")
    assert field == "prepare_at" and rule.startswith("must be between compress_at (0.7)")
