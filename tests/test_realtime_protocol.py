"""The OpenAI Realtime adapter against the offline realtime server (the faithful local server)."""

from __future__ import annotations

import pytest
from realtime_helpers import ScriptedEars, silence, tone, until

from xrmq.actors.realtime.openai_realtime import OpenAIRealtime
from xrmq.actors.realtime.pressure import RealtimeLimits
from xrmq.actors.realtime.provider import (
    AudioDelta,
    Disconnected,
    InputCommitted,
    InputTranscript,
    ProviderError,
    RealtimeConnectError,
    ResponseDone,
    ResponseStarted,
    SeedItem,
    SessionSeed,
    SpeechStarted,
    SpeechStopped,
    TranscriptDelta,
)
from xrmq.actors.realtime.server import Faults, OfflineRealtimeServer, ServerSettings

SEED = SessionSeed("The participant is Ada. Her badge number is 4417.", server_vad=False)


async def test_connect_returns_only_after_the_session_and_every_seeded_item_were_acknowledged() -> (
    None
):
    faults = Faults(ready_delay_s=0.05)
    async with OfflineRealtimeServer(brain=ScriptedEars(), faults=faults) as server:
        provider = OpenAIRealtime(base_url=server.url)
        seed = SessionSeed(
            "be brief",
            (SeedItem("user", "I parked on level 3."), SeedItem("assistant", "Noted: level 3.")),
        )
        connection = await provider.connect(seed)
        # Nothing is read after connect: the server had applied all of it before the return.
        assert server.instructions == ["be brief"]
        assert server.seeded_items == [
            [("user", "I parked on level 3."), ("assistant", "Noted: level 3.")]
        ]
        await connection.close()


async def test_a_manual_turn_yields_commit_transcript_audio_text_and_usage() -> None:
    async with OfflineRealtimeServer(brain=ScriptedEars(["What is my badge number?"])) as server:
        connection = await OpenAIRealtime(base_url=server.url).connect(SEED)
        await connection.append_audio(tone(0.3))
        await connection.commit()
        await connection.create_response()
        events: list = []
        done = await until(connection, ResponseDone, events)
        kinds = [type(event) for event in events]
        assert (
            kinds.index(InputCommitted)
            < kinds.index(InputTranscript)
            < kinds.index(ResponseStarted)
        )
        assert AudioDelta in kinds and TranscriptDelta in kinds
        assert isinstance(done, ResponseDone) and done.status == "completed"
        assert "4417" in done.text
        assert "".join(e.text for e in events if isinstance(e, TranscriptDelta)) == done.text
        assert (
            done.usage is not None and done.usage.input_tokens > 0 and done.usage.output_tokens > 0
        )
        await connection.close()
        assert [type(e) for e in [e async for e in connection.events()]][-1:] == [Disconnected]


async def test_usage_input_holds_the_whole_conversation_so_each_response_reports_more() -> None:
    brain = ScriptedEars(["My cat is called Tom.", "I live in Lyon.", "What is my cat called?"])
    async with OfflineRealtimeServer(brain=brain) as server:
        connection = await OpenAIRealtime(base_url=server.url).connect(SEED)
        inputs = []
        for _ in range(3):
            await connection.append_audio(tone(0.2))
            await connection.commit()
            await connection.create_response()
            done = await until(connection, ResponseDone, [])
            assert isinstance(done, ResponseDone) and done.usage is not None
            inputs.append(done.usage.input_tokens)
        assert inputs[0] < inputs[1] < inputs[2]
        assert isinstance(done, ResponseDone)
        assert "Tom" in done.text
        await connection.close()


async def test_server_vad_detects_the_turn_and_answers_by_itself() -> None:
    async with OfflineRealtimeServer(brain=ScriptedEars(["Hello there."])) as server:
        connection = await OpenAIRealtime(base_url=server.url, silence_ms=200).connect(
            SessionSeed("", server_vad=True)
        )
        for _ in range(10):
            await connection.append_audio(tone(0.02))
        for _ in range(12):
            await connection.append_audio(silence(0.02))
        events: list = []
        await until(connection, ResponseDone, events)
        kinds = [type(event) for event in events]
        assert kinds[:3] == [SpeechStarted, SpeechStopped, InputCommitted]
        await connection.close()


async def test_a_refused_handshake_is_a_connect_error() -> None:
    async with OfflineRealtimeServer(
        brain=ScriptedEars(), faults=Faults(refuse_connects=1)
    ) as server:
        provider = OpenAIRealtime(base_url=server.url)
        with pytest.raises(RealtimeConnectError, match="cannot connect"):
            await provider.connect(SEED)
        connection = await provider.connect(SEED)  # the next one is admitted
        await connection.close()
        assert server.stats["refused"] == 1


async def test_a_ready_acknowledgement_that_does_not_come_in_time_is_a_connect_error() -> None:
    async with OfflineRealtimeServer(
        brain=ScriptedEars(), faults=Faults(ready_delay_s=30)
    ) as server:
        with pytest.raises(RealtimeConnectError, match="no ready acknowledgement"):
            await OpenAIRealtime(base_url=server.url, ready_timeout_s=0.2).connect(SEED)


async def test_a_drop_mid_response_ends_the_stream_without_a_response_done() -> None:
    faults = Faults(drop_mid_response=1)
    async with OfflineRealtimeServer(brain=ScriptedEars(["Hi."]), faults=faults) as server:
        connection = await OpenAIRealtime(base_url=server.url).connect(SEED)
        await connection.append_audio(tone(0.2))
        await connection.commit()
        await connection.create_response()
        events: list = []
        end = await until(connection, Disconnected, events)
        assert isinstance(end, Disconnected) and end.by_client is False
        assert AudioDelta in [type(e) for e in events] and ResponseDone not in [
            type(e) for e in events
        ]


async def test_late_events_follow_a_response_done_when_injected() -> None:
    faults = Faults(late_events=True)
    async with OfflineRealtimeServer(brain=ScriptedEars(["Hi."]), faults=faults) as server:
        connection = await OpenAIRealtime(base_url=server.url).connect(SEED)
        await connection.append_audio(tone(0.2))
        await connection.commit()
        await connection.create_response()
        await until(connection, ResponseDone, [])
        await connection.close()
        after = [event async for event in connection.events()]
        assert [type(e) for e in after] == [ResponseDone, ProviderError, Disconnected]


async def test_over_the_token_limit_the_server_truncates_the_oldest_items() -> None:
    settings = ServerSettings(max_context_tokens=60)
    brain = ScriptedEars([f"Fact number {n}: the locker code is {1000 + n}." for n in range(6)])
    async with OfflineRealtimeServer(settings, brain=brain) as server:
        connection = await OpenAIRealtime(base_url=server.url).connect(
            SessionSeed("", server_vad=False)
        )
        for _ in range(6):
            await connection.append_audio(tone(0.1))
            await connection.commit()
            await connection.create_response()
            done = await until(connection, ResponseDone, [])
            assert isinstance(done, ResponseDone) and done.usage is not None
            assert done.usage.input_tokens <= 60
        assert server.stats["truncated_items"] > 0
        await connection.close()


async def test_over_the_turn_limit_the_server_errors_and_closes() -> None:
    async with OfflineRealtimeServer(
        ServerSettings(max_turns=1), brain=ScriptedEars(["a", "b"])
    ) as server:
        connection = await OpenAIRealtime(base_url=server.url).connect(SEED)
        for _ in range(2):
            await connection.append_audio(tone(0.1))
            await connection.commit()
        events: list = []
        await until(connection, Disconnected, events)
        errors = [e for e in events if isinstance(e, ProviderError)]
        assert [e.code for e in errors] == ["session_turn_limit"] and server.stats[
            "limit_closes"
        ] == 1


def test_base_url_and_auth_for_azure_and_compatible_servers() -> None:
    openai = OpenAIRealtime(api_key="k", model="gpt-realtime")
    assert openai.url == "wss://api.openai.com/v1/realtime?model=gpt-realtime"
    assert openai._headers()["Authorization"] == "Bearer k"
    azure = OpenAIRealtime(
        base_url="wss://res.openai.azure.com/openai/realtime?api-version=2025-04-01-preview&deployment=rt",
        api_key="k",
        auth_header="api-key",
    )
    assert azure.url.endswith("deployment=rt") and azure._headers()["api-key"] == "k"
    assert "Authorization" not in azure._headers()
    with pytest.raises(ValueError, match="base_url"):
        OpenAIRealtime(base_url="https://api.openai.com/v1/realtime")
    assert OpenAIRealtime(limits=RealtimeLimits(max_audio_turns=5)).limits.max_audio_turns == 5
