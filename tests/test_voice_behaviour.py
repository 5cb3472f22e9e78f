"""The voice input's behaviour on one embedded bus: what becomes a query, what interrupts.

Speech is espeak-ng's, published as 20 ms ``audio.in`` frames (``FrameSender``); the
recognizer is the bundled Whisper tiny.en (loaded once for the session).
"""

from __future__ import annotations

import asyncio
import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from xrmq.actors.runtime import Agent, AgentRuntime, RuntimeContext, subscribe
from xrmq.actors.voice import VoiceRenderer
from xrmq.actors.voice.audio_sink import AudioTopicSink
from xrmq.actors.voice.gate import GateSettings
from xrmq.actors.voice.listener import (
    VOICE_INPUT_KIND,
    VoiceInput,
    VoiceSettings,
    register_voice_input,
)
from xrmq.actors.voice.mic import FrameSender
from xrmq.actors.voice.pcm import float_to_pcm16, frames, read_wav
from xrmq.actors.voice.playback import AudioRecorder
from xrmq.actors.voice.stt import LiteLLMSTT
from xrmq.actors.voice.wer import word_error_rate
from xrmq.schemas import AudioFrame, ContextBlock, Interrupted, ResponseOutput, UserQuery
from xrmq.topics import INTERRUPTED_TOPIC, QUERY_TOPIC, VOICE_OUTPUT_TOPIC

from voice_support import np, shared_stt, spoken

WAIT_S = 60.0
SILENCE = np.zeros(8000, np.float32)


class Queries(Agent):
    """Collects queries and interruptions, with an event per arrival."""

    def __init__(self) -> None:
        self.queries: list[tuple[str | None, UserQuery]] = []
        self.interrupted_at: list[float] = []
        """Publish time (unix seconds) of each ``Interrupted``."""
        self.changed = asyncio.Event()

    @subscribe(QUERY_TOPIC)
    async def on_query(self, query: UserQuery, ctx: RuntimeContext) -> None:
        self.queries.append((ctx.participant_id, query))
        self.changed.set()

    @subscribe(INTERRUPTED_TOPIC)
    async def on_interrupted(self, message: Interrupted, ctx: RuntimeContext) -> None:
        self.interrupted_at.append(ctx.metadata.timestamp_us / 1e6)
        self.changed.set()

    async def wait_for(self, condition) -> None:
        while not condition(self):
            self.changed.clear()
            await asyncio.wait_for(self.changed.wait(), WAIT_S)


def voice(runtime: AgentRuntime, participant: str) -> VoiceInput:
    instance = runtime.keyed_instances(VOICE_INPUT_KIND)[participant]
    assert isinstance(instance, VoiceInput)
    return instance


@pytest.mark.timeout(120)
async def test_silence_and_noise_make_no_query_and_the_speech_after_them_does(tmp_path):
    rng = np.random.default_rng(7)
    noise = (rng.standard_normal(32000) * 0.1).astype(np.float32)
    sentence = "Is the kettle in lab three still hot?"
    runtime = AgentRuntime()
    context = (ContextBlock(None, "The kettle in lab three is set to 85 degrees."),)
    register_voice_input(runtime, shared_stt(), context=lambda participant: context)
    seen = runtime.register("queries", Queries())
    async with runtime:
        sender = FrameSender(runtime, "p1", realtime=False)
        await sender.send(float_to_pcm16(np.concatenate([SILENCE, SILENCE, noise, SILENCE])))
        await sender.send(
            float_to_pcm16(np.concatenate([spoken(tmp_path, "q", sentence), SILENCE, SILENCE]))
        )
        await seen.wait_for(lambda s: s.queries)
        counts = voice(runtime, "p1").counts
    [(participant, query)] = seen.queries
    assert participant == "p1" and word_error_rate(sentence, query.text) <= 0.25, query.text
    assert counts.utterances == 1 and counts.queries == 1 and counts.frame_gaps == 0
    assert counts.frames == sender.sent


@pytest.mark.timeout(120)
async def test_two_participants_speaking_at_once_make_two_queries_each_with_its_participant(
    tmp_path,
):
    sentences = {
        "alice": "Where did I leave the spare key?",
        "bob": "Turn the lights off in the kitchen.",
    }
    pcm = {
        who: float_to_pcm16(
            np.concatenate([SILENCE, spoken(tmp_path, who, text), SILENCE, SILENCE])
        )
        for who, text in sentences.items()
    }
    runtime = AgentRuntime()
    register_voice_input(runtime, shared_stt())
    seen = runtime.register("queries", Queries())
    async with runtime:
        senders = {who: FrameSender(runtime, who, realtime=False) for who in sentences}
        streams = {who: list(frames(data)) for who, data in pcm.items()}
        for index in range(max(len(chunks) for chunks in streams.values())):
            for who, chunks in streams.items():  # interleaved frame by frame: both at once
                if index < len(chunks):
                    await senders[who].send(chunks[index])
        await seen.wait_for(lambda s: len(s.queries) >= 2)
    heard = dict(seen.queries)
    assert set(heard) == {"alice", "bob"}
    for who, text in sentences.items():
        assert word_error_rate(text, heard[who].text) <= 0.25, (who, heard[who].text)


LONG_ANSWER = (
    "The kettle in lab three was switched on at nine this morning, it is set to eighty five "
    "degrees, and Dana asked that nobody moves it before the experiment ends this afternoon."
)


class Answerer(Agent):
    """Answers the first query with a long reply, so there is playback to barge into; later
    queries get no answer, so every ``audio.out`` frame belongs to that one reply."""

    def __init__(self) -> None:
        self.answered = False

    @subscribe(QUERY_TOPIC)
    async def on_query(self, query: UserQuery, ctx: RuntimeContext) -> None:
        if self.answered:
            return
        self.answered = True
        await ctx.publish(
            VOICE_OUTPUT_TOPIC,
            ResponseOutput("reply", LONG_ANSWER, request_id=ctx.metadata.message_id),
        )


class FirstFrame(AudioRecorder):
    """An ``AudioRecorder`` that also signals its first frame and keeps the publish time
    (the sink's stamp, unix seconds) of the last frame, so what is measured is when audio
    left the sink, not how far behind this recorder's mailbox ran."""

    def __init__(self, wav_dir: Path) -> None:
        self.started = asyncio.Event()
        self.last_sent_at: float | None = None
        super().__init__(wav_dir, on_frame=self._seen)

    def _seen(self, participant: str, frame: AudioFrame) -> None:
        self.last_sent_at = frame.timestamp_us / 1e6
        self.started.set()


async def barge_in_stack(tmp_path: Path, settings: VoiceSettings):
    runtime = AgentRuntime()
    register_voice_input(runtime, shared_stt(), settings=settings)
    seen = runtime.register("queries", Queries())
    runtime.register("answerer", Answerer())
    recorder = runtime.register("recorder", FirstFrame(tmp_path / "out"))
    runtime.register(
        "renderer",
        VoiceRenderer(
            AudioTopicSink(runtime.publish),
            query_topic=QUERY_TOPIC,
            interrupted_topic=INTERRUPTED_TOPIC,
        ),
    )
    return runtime, seen, recorder


@pytest.mark.timeout(150)
async def test_speech_over_the_minimum_during_playback_interrupts_and_the_audio_stops_within_100_ms(
    tmp_path,
):
    settings = VoiceSettings(gate=GateSettings(min_speech_s=0.6))
    runtime, seen, recorder = await barge_in_stack(tmp_path, settings)
    question = float_to_pcm16(
        np.concatenate(
            [SILENCE, spoken(tmp_path, "q", "What is the kettle set to?"), SILENCE, SILENCE]
        )
    )
    barge = float_to_pcm16(
        np.concatenate(
            [spoken(tmp_path, "b", "Wait, stop, tell me about the spare key."), SILENCE, SILENCE]
        )
    )
    async with runtime:
        sender = FrameSender(runtime, "p1")
        await sender.send(question)
        await asyncio.wait_for(recorder.started.wait(), WAIT_S)
        await sender.send(barge)
        await seen.wait_for(lambda s: s.interrupted_at)
        await asyncio.wait_for(recorder.wait_written(1), WAIT_S)
        counts = await voice(runtime, "p1").wait_until(lambda c: c.queries >= 2)
    interrupted = seen.interrupted_at[0]
    stopped_after_ms = (recorder.last_sent_at - interrupted) * 1000
    print(f"last audio.out frame {stopped_after_ms:.1f} ms after Interrupted")
    assert stopped_after_ms <= 100
    assert counts.interruptions == 1 and counts.backchannels == 0
    with_answer = read_wav(recorder.written[0])[0].size / 16000
    assert with_answer < 8.0  # cut: the whole answer lasts ~11 s


@pytest.mark.timeout(150)
async def test_a_short_yeah_during_playback_neither_interrupts_nor_becomes_a_query(tmp_path):
    settings = VoiceSettings(gate=GateSettings(min_speech_s=0.6))
    runtime, seen, recorder = await barge_in_stack(tmp_path, settings)
    question = float_to_pcm16(
        np.concatenate(
            [SILENCE, spoken(tmp_path, "q", "What is the kettle set to?"), SILENCE, SILENCE]
        )
    )
    yeah = float_to_pcm16(np.concatenate([spoken(tmp_path, "y", "yeah"), SILENCE, SILENCE]))
    async with runtime:
        sender = FrameSender(runtime, "p1")
        await sender.send(question)
        await asyncio.wait_for(recorder.started.wait(), WAIT_S)
        await sender.send(yeah)
        counts = await voice(runtime, "p1").wait_until(
            lambda c: c.backchannels + c.interruptions >= 1 or c.queries >= 2
        )
        await asyncio.wait_for(recorder.wait_written(1), WAIT_S)
    assert counts.backchannels == 1 and counts.interruptions == 0 and counts.queries == 1
    assert seen.interrupted_at == [] and len(seen.queries) == 1
    full, _ = read_wav(recorder.written[0])
    assert full.size / 16000 > 9.0  # the whole answer played


class TranscriptionServer(BaseHTTPRequestHandler):
    """The OpenAI audio transcription API on loopback: records each request, answers JSON."""

    requests: list[tuple[str, str, bytes]] = []

    def do_POST(self) -> None:
        body = self.rfile.read(int(self.headers["Content-Length"]))
        self.requests.append((self.path, self.headers["Content-Type"], body))
        reply = json.dumps({"text": "Where did I leave the spare key?"}).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(reply)))
        self.end_headers()
        self.wfile.write(reply)

    def log_message(self, *args: object) -> None:
        pass


def multipart_file(content_type: str, body: bytes) -> bytes:
    """The ``file`` part of a multipart/form-data body."""
    boundary = content_type.split("boundary=")[1].strip('"').encode()
    for part in body.split(b"--" + boundary):
        head, _, data = part.partition(b"\r\n\r\n")
        if b'name="file"' in head:
            return data.rstrip(b"\r\n")
    raise AssertionError("no file part")


@pytest.mark.timeout(60)
async def test_a_litellm_transcription_model_receives_the_utterances_audio(tmp_path):
    TranscriptionServer.requests = []
    server = ThreadingHTTPServer(("127.0.0.1", 0), TranscriptionServer)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    speech = spoken(tmp_path, "q", "Where did I leave the spare key?")
    try:
        stt = LiteLLMSTT(
            "openai/whisper-1",
            api_base=f"http://127.0.0.1:{server.server_address[1]}/v1",
            api_key="sk-local",
        )
        runtime = AgentRuntime()
        register_voice_input(runtime, stt)
        seen = runtime.register("queries", Queries())
        async with runtime:
            sender = FrameSender(runtime, "p1", realtime=False)
            await sender.send(float_to_pcm16(np.concatenate([SILENCE, speech, SILENCE, SILENCE])))
            await seen.wait_for(lambda s: s.queries)
    finally:
        server.shutdown()
        thread.join()
    [(path, content_type, body)] = TranscriptionServer.requests
    assert path == "/v1/audio/transcriptions" and content_type.startswith("multipart/form-data")
    audio, rate = read_wav(multipart_file(content_type, body))
    assert rate == 16000
    # the utterance, with its margins
    assert speech.size / rate <= audio.size / rate <= speech.size / rate + 1.0
    assert float(np.sqrt(np.mean(audio**2))) > 0.02
    assert seen.queries[0][1].text == "Where did I leave the spare key?"


@pytest.mark.timeout(60)
async def test_a_participant_leaving_releases_their_voice_input(tmp_path):
    from xrmq.schemas import ParticipantLeft
    from xrmq.topics import PARTICIPANT_LEFT_TOPIC

    speech = spoken(tmp_path, "q", "Where did I leave the spare key?")
    runtime = AgentRuntime()
    register_voice_input(runtime, shared_stt())
    async with runtime:
        # The instance the frames go to, spawned as their first frame would spawn it, so
        # the test holds it before anything is delivered (a publish returns before that).
        held = runtime.spawn(VOICE_INPUT_KIND, "p1")
        assert isinstance(held, VoiceInput)
        sender = FrameSender(runtime, "p1", realtime=False)
        await sender.send(float_to_pcm16(np.concatenate([SILENCE, speech[: speech.size // 2]])))
        await held.wait_until(lambda c: c.frames >= sender.sent)
        assert held.held_samples > 0  # mid-utterance: audio is buffered
        await runtime.publish(PARTICIPANT_LEFT_TOPIC, ParticipantLeft(), participant_id="p1")
        await asyncio.wait_for(held.stopped.wait(), WAIT_S)
        assert "p1" not in runtime.keyed_instances(VOICE_INPUT_KIND)
    assert held.held_samples == 0 and held.counts.queries == 0


class SpeechServer(BaseHTTPRequestHandler):
    """The OpenAI speech API on loopback: answers every request with ``wav`` (an espeak WAV)."""

    wav = b""
    requests: list[tuple[str, dict]] = []

    def do_POST(self) -> None:
        body = self.rfile.read(int(self.headers["Content-Length"]))
        self.requests.append((self.path, json.loads(body)))
        self.send_response(200)
        self.send_header("Content-Type", "audio/wav")
        self.send_header("Content-Length", str(len(self.wav)))
        self.end_headers()
        self.wfile.write(self.wav)

    def log_message(self, *args: object) -> None:
        pass


@pytest.mark.timeout(60)
async def test_a_litellm_speech_model_is_asked_for_the_segment_and_its_audio_is_published(tmp_path):
    from xrmq.actors.voice.audio_sink import LiteLLMSynthesizer
    from xrmq.actors.voice.ordering import Segment

    from voice_support import speak

    SpeechServer.wav = speak(tmp_path, "answer", "The key is in drawer twelve.").read_bytes()
    SpeechServer.requests = []
    server = ThreadingHTTPServer(("127.0.0.1", 0), SpeechServer)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    published: list[AudioFrame] = []

    async def publish(topic, message, **kwargs) -> None:
        if isinstance(message, AudioFrame):
            published.append(message)

    try:
        synthesizer = LiteLLMSynthesizer(
            "openai/tts-1",
            api_key="sk-local",
            api_base=f"http://127.0.0.1:{server.server_address[1]}/v1",
        )
        sink = AudioTopicSink(publish, synthesizer)
        await sink.play(
            Segment(
                participant_id="p1",
                response=1,
                kind="reply",
                sources=("t",),
                request_id="r",
                text="The key is in drawer twelve.",
                timestamp_us=None,
                first=True,
                urgent=False,
                token=1,
            )
        )
    finally:
        server.shutdown()
        thread.join()
    [(path, request)] = SpeechServer.requests
    assert path == "/v1/audio/speech"
    assert (request["input"], request["model"], request["response_format"]) == (
        "The key is in drawer twelve.",
        "tts-1",
        "wav",
    )
    expected, rate = read_wav(SpeechServer.wav)
    assert abs(len(published) * 0.02 - expected.size / rate) <= 0.02
    assert [frame.frame for frame in published] == list(range(len(published)))
