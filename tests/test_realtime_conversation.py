"""RealtimeConversation on a bus: speech in on audio.in, speech out on audio.out, the
transcript as a seed-001 reply, and one shared memory with the text destinations."""

from __future__ import annotations

import asyncio

import pytest
from realtime_helpers import WAIT_S, ScriptedEars

from xrmq.actors.context import ContextManager
from xrmq.actors.models import OfflineLLM
from xrmq.actors.realtime.conversation import RealtimeConversation
from xrmq.actors.realtime.openai_realtime import OpenAIRealtime
from xrmq.actors.realtime.pressure import RealtimeLimits
from xrmq.actors.realtime.server import OfflineRealtimeServer, ServerSettings
from xrmq.actors.realtime.session import SessionSettings
from xrmq.actors.runtime import Agent, AgentRuntime, RuntimeContext, subscribe
from xrmq.actors.tools.summary import llm_summarizer
from xrmq.schemas import AgentTurn, AudioFrame, AudioPlayback, ResponseOutput
from xrmq.topics import AUDIO_IN_TOPIC, AUDIO_OUT_TOPIC, AUDIO_PLAYBACK_TOPIC, VOICE_OUTPUT_TOPIC

from system_packages import needs_espeak

LLM = OfflineLLM(time_to_first_token_s=0, tokens_per_second=0)


class Client(Agent):
    """The participant's client: collects replies, spoken frames and playback states."""

    def __init__(self) -> None:
        self.replies: list[ResponseOutput] = []
        self.frames: list[AudioFrame] = []
        self.playback: list[str] = []
        self.changed = asyncio.Condition()

    @subscribe(VOICE_OUTPUT_TOPIC)
    async def on_reply(self, message: ResponseOutput, ctx: RuntimeContext) -> None:
        async with self.changed:
            self.replies.append(message)
            self.changed.notify_all()

    @subscribe(AUDIO_OUT_TOPIC)
    async def on_frame(self, frame: AudioFrame, ctx: RuntimeContext) -> None:
        async with self.changed:
            self.frames.append(frame)
            self.changed.notify_all()

    @subscribe(AUDIO_PLAYBACK_TOPIC)
    async def on_playback(self, message: AudioPlayback, ctx: RuntimeContext) -> None:
        async with self.changed:
            self.playback.append(message.state)
            self.changed.notify_all()

    async def wait(self, condition) -> None:
        async with asyncio.timeout(WAIT_S), self.changed:
            await self.changed.wait_for(lambda: condition(self))

    def answers(self) -> list[str]:
        """Each finished reply's text, in order (fragments of one response_id joined)."""
        texts: dict[str, list[str]] = {}
        done: list[str] = []
        for reply in self.replies:
            texts.setdefault(reply.response_id or "", []).append(reply.text)
            if reply.final:
                done.append("".join(texts[reply.response_id or ""]).strip())
        return done


def _realtime(
    server: OfflineRealtimeServer,
    context: ContextManager,
    runtime: AgentRuntime,
    *,
    limits: RealtimeLimits | None = None,
    summarizer: OfflineLLM = LLM,
) -> RealtimeConversation:
    provider = OpenAIRealtime(
        base_url=server.url, limits=limits or RealtimeLimits(), silence_ms=300
    )
    return RealtimeConversation(
        provider,
        context=context,
        runtime=runtime,
        output_topic=VOICE_OUTPUT_TOPIC,
        summarize=llm_summarizer(summarizer, limit_bytes=480),
        settings=SessionSettings(keep_tail=2),
    )


@pytest.mark.timeout(120)
@needs_espeak
async def test_speech_in_is_answered_with_speech_out_and_a_reply_from_the_shared_context() -> None:
    pytest.importorskip("faster_whisper")
    from xrmq.actors.voice.audio_sink import EspeakSynthesizer
    from xrmq.actors.voice.pcm import SAMPLE_RATE, float_to_pcm16, frames, resample

    context = ContextManager(LLM)
    # A text destination's earlier exchange: the realtime session must know it.
    context.record_exchange(
        "p1",
        "The kettle in lab three is set to 85 degrees.",
        "Noted.",
        timestamp_us=1_700_000_000_000_000,
        exchange_id="text-1",
    )
    samples, rate = await EspeakSynthesizer().synthesize("What is the kettle set to?")
    speech = float_to_pcm16(resample(samples, rate, SAMPLE_RATE))
    runtime = AgentRuntime()
    async with OfflineRealtimeServer() as server:
        client = Client()
        runtime.register("client", client)
        realtime = _realtime(server, context, runtime)
        runtime.register("realtime", realtime)
        await runtime.start()
        pcm = speech + bytes(
            2 * SAMPLE_RATE
        )  # then a second of silence: the server's VAD ends the turn
        for number, chunk in enumerate(frames(pcm, SAMPLE_RATE, 20)):
            await runtime.publish(
                AUDIO_IN_TOPIC,
                AudioFrame(chunk, SAMPLE_RATE, 1, number, 1),
                participant_id="p1",
                source="mic",
            )
        await client.wait(lambda c: c.answers() and c.playback[-1:] == ["done"])
        await realtime.close()
        await runtime.stop()
    answer = client.answers()[0]
    assert "85" in answer
    assert "kettle" in server.instructions[0] and "85" in server.instructions[0]
    assert client.playback == ["started", "done"] and len(client.frames) > 10
    assert [f.frame for f in client.frames] == list(range(len(client.frames)))
    assert all(reply.request_id == client.replies[0].request_id for reply in client.replies)
    dialogue = "\n".join(block.text for block in context.blocks("p1"))
    assert "set to?" in dialogue and answer in dialogue  # the spoken exchange, recorded
    await context.close()


@pytest.mark.timeout(120)
@pytest.mark.parametrize("summary_delay_s", [0.0, 0.15])
async def test_a_long_session_rolls_over_several_times_and_still_answers_the_first_facts(
    summary_delay_s: float,
) -> None:
    """Also with a summarizer slower than a turn (0.15 s before its first token: before
    ``settled()``, a summary still running at the next turn left Lyon out of the seed)."""
    summarizer = OfflineLLM(time_to_first_token_s=summary_delay_s, tokens_per_second=0)
    limit = 400
    context = ContextManager(LLM)
    facts = [
        "My badge number is 4417.",
        "I parked on level 3.",
        "My sister lives in Lyon.",
        "The router password is on the fridge.",
        "My dentist is Dr. Okafor.",
        "The printer is in room 12.",
        "My flight leaves at nine.",
        "The plant needs water on Fridays.",
        "The spare battery is in the red case.",
        "My locker is number 58.",
    ]
    runtime = AgentRuntime()
    async with OfflineRealtimeServer(
        ServerSettings(max_context_tokens=limit), brain=ScriptedEars()
    ) as server:
        client = Client()
        runtime.register("client", client)
        realtime = _realtime(
            server,
            context,
            runtime,
            limits=RealtimeLimits(max_context_tokens=limit),
            summarizer=summarizer,
        )
        runtime.register("realtime", realtime)
        await runtime.start()
        texts = facts * 2 + [
            "What is my badge number?",
            "Which level did I park on?",
            "Where does my sister live?",
        ]
        results = []
        for index, text in enumerate(texts):
            turn = AgentTurn(
                "p1", f"turn-{index}", text, timestamp_us=1_700_000_000_000_000 + index
            )
            async with asyncio.timeout(WAIT_S):
                results.append(await realtime.answer(turn, started=_noop))
            # The participant listens to the answer before speaking again, and the
            # checkpoint or rollover its end started is over first: what each new session
            # is seeded with then does not depend on how fast the summarizer ran.
            await client.wait(lambda c, n=index + 1: c.playback.count("done") >= n)
            await realtime.settled("p1")
        await client.wait(lambda c: len(c.answers()) == len(texts))
        session = realtime.participants["p1"].session
        rollovers, stale = session.counts["rollovers"], session.counts["stale_events"]
        await realtime.close()
        await runtime.stop()
    assert rollovers >= 3
    assert server.stats["truncated_items"] == 0 and server.stats["limit_closes"] == 0
    responses = [result.response or "" for result in results]
    assert "4417" in responses[-3] and "level 3" in responses[-2]
    assert "Lyon" in responses[-1]
    assert client.answers()[-3:] == [result.response for result in results[-3:]]
    assert stale == 0
    recorded = "\n".join(block.text for block in context.blocks("p1"))
    assert "What is my badge number?" in recorded  # recorded into the shared dialogue
    await context.close()


async def _noop() -> None:
    return None


async def speak(runtime: AgentRuntime, pcm: bytes, first: int) -> int:
    """``pcm`` on ``audio.in`` as p1's microphone, in 20 ms frames numbered from ``first``;
    the next frame's number."""
    from xrmq.actors.voice.pcm import SAMPLE_RATE

    size = SAMPLE_RATE * 20 // 1000 * 2
    for offset in range(0, len(pcm), size):
        await runtime.publish(
            AUDIO_IN_TOPIC,
            AudioFrame(pcm[offset : offset + size], SAMPLE_RATE, 1, first, 1),
            participant_id="p1",
            source="mic",
        )
        first += 1
    return first


@pytest.mark.timeout(60)
async def test_speech_over_the_answer_cuts_its_audio_at_once() -> None:
    from realtime_helpers import silence, tone

    from xrmq.actors.voice.pcm import SAMPLE_RATE

    context = ContextManager(LLM)
    runtime = AgentRuntime()
    async with OfflineRealtimeServer(
        brain=ScriptedEars(["Tell me a long story.", "Stop."], speech_s=5.0)
    ) as server:
        client = Client()
        runtime.register("client", client)
        realtime = _realtime(server, context, runtime)
        runtime.register("realtime", realtime)
        await runtime.start()

        number = await speak(
            runtime, tone(0.3, rate=SAMPLE_RATE) + silence(0.5, rate=SAMPLE_RATE), 0
        )
        await client.wait(lambda c: c.playback == ["started"] and len(c.frames) >= 5)
        # The participant talks over the answer.
        await speak(runtime, tone(0.1, rate=SAMPLE_RATE), number)
        await client.wait(lambda c: c.playback == ["started", "done"])
        spoken = len(client.frames)
        await realtime.close()
        await runtime.stop()
    await context.close()
    assert spoken < 5.0 / 0.02 / 2  # far less than the 5 s answer was played


@pytest.mark.timeout(60)
async def test_barge_in_truncates_the_answer_to_the_audio_heard_on_server_and_transcript() -> None:
    from realtime_helpers import silence, tone

    from xrmq.actors.realtime.checkpoint import heard_part
    from xrmq.actors.voice.pcm import SAMPLE_RATE

    context = ContextManager(LLM)
    runtime = AgentRuntime()
    brain = ScriptedEars(["My badge number is 4417 and my desk is by the window.", "Stop."])
    brain.speech_s = 4.0
    async with OfflineRealtimeServer(brain=brain) as server:
        client = Client()
        runtime.register("client", client)
        realtime = _realtime(server, context, runtime)
        runtime.register("realtime", realtime)
        await runtime.start()

        number = await speak(
            runtime, tone(0.3, rate=SAMPLE_RATE) + silence(0.5, rate=SAMPLE_RATE), 0
        )
        await client.wait(lambda c: c.playback == ["started"] and len(c.frames) >= 60)
        # The participant talks over the answer.
        await speak(runtime, tone(0.1, rate=SAMPLE_RATE), number)
        await client.wait(lambda c: c.playback == ["started", "done"])
        spoken = len(client.frames)
        session = realtime.participants["p1"].session
        async with asyncio.timeout(WAIT_S):
            await session.wait_for(lambda: session.counts["items_truncated"] == 1)
        answer = client.answers()[0]
        transcript = [m.text for m in session.transcript.messages if m.role == "assistant"]
        await realtime.close()
        await runtime.stop()
    await context.close()
    ((_, end_ms, kept),) = server.truncations
    assert abs(end_ms - spoken * 20) <= 40  # what was played when the participant spoke
    assert kept == heard_part(answer, end_ms, 4000) and len(kept) < len(answer)
    assert transcript[0] == kept  # the session's own transcript: what was heard
