"""The voice front end end to end: espeak-ng speech as audio frames in, a query, speech out.

A real broker process, ``xrmq mic`` in another process publishing a WAV, and this
process hosting the ``voice`` input (Silero VAD + Whisper tiny.en), an answering actor,
and the renderer speaking onto ``audio.out`` through ``AudioTopicSink``.
"""

from __future__ import annotations

import asyncio
import os
import sys
import wave
from pathlib import Path

import pytest

from xrmq.actors.runtime import Agent, AgentRuntime, RuntimeContext, subscribe
from xrmq.actors.voice import VoiceRenderer
from xrmq.actors.voice.audio_sink import AudioTopicSink
from xrmq.actors.voice.listener import VOICE_INPUT_KIND, VoiceInput, register_voice_input
from xrmq.actors.voice.pcm import read_wav, resample
from xrmq.actors.voice.playback import AudioRecorder
from xrmq.actors.voice.wer import word_error_rate
from xrmq.schemas import ContextBlock, ResponseOutput, UserQuery
from xrmq.topics import INTERRUPTED_TOPIC, QUERY_TOPIC, VOICE_OUTPUT_TOPIC

from buses import broker_process
from voice_support import np, shared_stt, speak

SENTENCE = "Where did I leave the spare key?"
CONTEXT = (
    "The spare key is in the blue drawer of lab 3. "
    "Dana moved the kettle to the kitchen at 9 this morning."
)
ANSWER = "The spare key is in the blue drawer of lab three."
WAIT_S = 60.0


class Answerer(Agent):
    """Records each query and answers it with a fixed reply."""

    def __init__(self) -> None:
        self.queries: list[tuple[str | None, UserQuery]] = []
        self.arrived = asyncio.Event()

    @subscribe(QUERY_TOPIC)
    async def on_query(self, query: UserQuery, ctx: RuntimeContext) -> None:
        self.queries.append((ctx.participant_id, query))
        self.arrived.set()
        await ctx.publish(
            VOICE_OUTPUT_TOPIC, ResponseOutput("reply", ANSWER, request_id=ctx.metadata.message_id)
        )


async def mic(bus: str, participant: str, wav: Path, tmp_path: Path) -> asyncio.subprocess.Process:
    errors = open(tmp_path / f"mic-{participant}.stderr", "wb")
    return await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "xrmq.actors.cli",
        "mic",
        "--bus",
        bus,
        "--participant",
        participant,
        "--wav",
        str(wav),
        stdout=asyncio.subprocess.PIPE,
        stderr=errors,
        env={**os.environ, "XRMQ_LOG_LEVEL": "WARNING"},
    )


def wav_stats(path: Path) -> tuple[float, float]:
    """Duration (s) and RMS (of full scale) of a PCM16 WAV."""
    with wave.open(str(path), "rb") as reader:
        data = np.frombuffer(reader.readframes(reader.getnframes()), dtype="<i2").astype(np.float64)
        return reader.getnframes() / reader.getframerate(), float(
            np.sqrt(np.mean((data / 32768) ** 2))
        )


@pytest.mark.timeout(180)
async def test_spoken_question_from_another_process_becomes_a_query_and_is_answered_in_audio(
    tmp_path,
):
    wav = speak(tmp_path, "question", SENTENCE)
    stt = shared_stt()
    blocks = (ContextBlock(None, CONTEXT),)
    with broker_process() as bus:
        runtime = AgentRuntime(bus)
        register_voice_input(runtime, stt, context=lambda participant: blocks)
        answerer = runtime.register("answerer", Answerer())
        recorder = runtime.register("recorder", AudioRecorder(tmp_path / "out"))
        runtime.register(
            "renderer",
            VoiceRenderer(
                AudioTopicSink(runtime.publish),
                query_topic=QUERY_TOPIC,
                interrupted_topic=INTERRUPTED_TOPIC,
            ),
        )
        async with runtime:
            process = await mic(bus, "p1", wav, tmp_path)
            try:
                await asyncio.wait_for(answerer.arrived.wait(), WAIT_S)
                [(participant, query)] = answerer.queries
                voice = runtime.keyed_instances(VOICE_INPUT_KIND)["p1"]
                assert isinstance(voice, VoiceInput)
                await asyncio.wait_for(recorder.wait_written(1), WAIT_S)
                assert await asyncio.wait_for(process.wait(), WAIT_S) == 0
            finally:
                if process.returncode is None:
                    process.kill()
                    await process.wait()
    assert participant == "p1"
    error = word_error_rate(SENTENCE, query.text)
    samples, rate = read_wav(wav)
    plain = await stt.transcribe(
        np.concatenate([np.zeros(4800, np.float32), resample(samples, rate)])
    )
    print(
        f"heard {query.text!r}: WER {error:.2f} (context biasing on); "
        f"biasing off: {plain!r}, WER {word_error_rate(SENTENCE, plain):.2f}"
    )
    assert error <= 0.25, query.text
    assert query.timestamp_us > 0
    # its speech and transcript times, for the turn record (issue 33)
    assert query.speech_end_us is not None and query.transcribed_us is not None
    assert query.timestamp_us < query.speech_end_us <= query.transcribed_us
    assert voice.counts.frame_gaps == 0 and voice.counts.queries == 1
    [answer] = recorder.written
    duration, rms = wav_stats(answer)
    spoken_duration, _ = wav_stats(speak(tmp_path, "answer", ANSWER, wpm=175))
    assert abs(duration - spoken_duration) < 0.1 + 0.02, (duration, spoken_duration)
    assert rms > 0.02, rms


@pytest.mark.timeout(120)
async def test_the_voice_client_example_sends_a_wav_and_saves_the_spoken_answer(tmp_path):
    wav = speak(tmp_path, "question", SENTENCE)
    with broker_process() as bus:
        runtime = AgentRuntime(bus)
        register_voice_input(runtime, shared_stt())
        answerer = runtime.register("answerer", Answerer())
        runtime.register(
            "renderer",
            VoiceRenderer(
                AudioTopicSink(runtime.publish),
                query_topic=QUERY_TOPIC,
                interrupted_topic=INTERRUPTED_TOPIC,
            ),
        )
        async with runtime:
            process = await asyncio.create_subprocess_exec(
                sys.executable,
                str(Path(__file__).parent.parent / "examples" / "voice_client.py"),
                bus,
                "p1",
                str(wav),
                str(tmp_path / "answers"),
                stdout=asyncio.subprocess.PIPE,
                env={**os.environ, "XRMQ_LOG_LEVEL": "WARNING"},
            )
            try:
                stdout, _ = await asyncio.wait_for(process.communicate(), WAIT_S)
            finally:
                if process.returncode is None:
                    process.kill()
                    await process.wait()
    assert process.returncode == 0
    lines = stdout.decode().splitlines()
    assert lines[0].startswith("sent ") and lines[1].startswith("answer ")
    assert answerer.queries and answerer.queries[0][0] == "p1"
    duration, rms = wav_stats(Path(lines[1].removeprefix("answer ")))
    assert duration > 2.0 and rms > 0.02
