"""Piper, the offline voice: 16 kHz frames Whisper understands, a sentence at a time, cut at once.

The voice is the bundled ``en_US-joe-medium`` (loaded once for the module); the
recognizer that checks what it said is the bundled Whisper tiny.en.
"""

from __future__ import annotations

import asyncio
import threading
from pathlib import Path

import pytest

pytest.importorskip("piper", reason="the voice extra (piper-tts) is not installed")

from xrmq.actors.clock import now_us
from xrmq.actors.edge.config import ConfigError
from xrmq.actors.edge.config_loader import decode_config
from xrmq.actors.interaction import ResponseOutputs
from xrmq.actors.runtime import AgentRuntime
from xrmq.actors.voice import builders
from xrmq.actors.voice.audio_sink import AudioTopicSink, EspeakSynthesizer
from xrmq.actors.voice.ordering import Segment, VoiceOrdering
from xrmq.actors.voice.pcm import SAMPLE_RATE, float_to_pcm16, frames, pcm16_to_float, resample
from xrmq.actors.voice.piper import PiperSynthesizer, bundled_voice_path
from xrmq.actors.voice.queues import MAX_UNSPOKEN_CHARS, split_sentences
from xrmq.actors.voice.renderer import VoiceRenderer
from xrmq.actors.voice.stt import ModelIntegrityError, verify_file
from xrmq.actors.voice.wer import word_error_rate
from xrmq.schemas import AudioFrame, AudioPlayback, Interrupted, ResponseOutput
from xrmq.topics import INTERRUPTED_TOPIC, VOICE_OUTPUT_TOPIC

from voice_support import np, shared_stt

pytestmark = pytest.mark.timeout(120)

SENTENCE = "The spare key is in drawer 12 of the blue cabinet."
SECOND = "The kettle in the lab is set to 85 degrees."

_PIPER: PiperSynthesizer | None = None


def piper() -> PiperSynthesizer:
    global _PIPER
    if _PIPER is None:
        _PIPER = PiperSynthesizer()
        _PIPER.load()
    return _PIPER


def share_loaded_voice(synthesizer: PiperSynthesizer) -> None:
    """Give ``synthesizer`` the module's loaded voice and its settings (the clear-speech
    noise scales: without them Piper's noisier defaults make Whisper mishear numbers)."""
    loaded = piper()
    synthesizer._voice, synthesizer._config = loaded._voice, loaded._config


def segment(text: str, token: int = 1) -> Segment:
    return Segment("p1", token, "reply", ("conversation",), "r1", text, None, True, False, token)


class Frames:
    """The sink's ``publish``: keeps every ``audio.out`` frame."""

    def __init__(self) -> None:
        self.frames: list[AudioFrame] = []
        self.first = asyncio.Event()
        self.done = asyncio.Event()
        """Set when the sink says the playback is done (``audio.playback``)."""

    async def __call__(self, topic, message, **kwargs) -> None:
        if isinstance(message, AudioFrame):
            self.frames.append(message)
            self.first.set()
        elif isinstance(message, AudioPlayback) and message.state == "done":
            self.done.set()

    def samples(self) -> np.ndarray:
        return pcm16_to_float(b"".join(frame.pcm for frame in self.frames))


async def test_piper_speaks_a_sentence_as_16_khz_pcm16_frames_whisper_transcribes_back():
    published = Frames()
    await AudioTopicSink(published, piper()).play(segment(SENTENCE))
    frames = published.frames
    assert frames and {(f.sample_rate, f.channels) for f in frames} == {(SAMPLE_RATE, 1)}
    assert {len(frame.pcm) for frame in frames} == {SAMPLE_RATE * 20 // 1000 * 2}  # PCM16, 20 ms
    seconds = len(frames) * 0.02
    words = len(SENTENCE.split())
    assert 0.2 * words <= seconds <= 0.6 * words, f"{seconds:.2f} s for {words} words"
    heard = await shared_stt().transcribe(published.samples())
    assert word_error_rate(SENTENCE, heard) <= 0.1, heard


class GatedPiper(PiperSynthesizer):
    """Piper that synthesizes the second sentence only once the first frame is out."""

    def __init__(self, first_frame_out: threading.Event) -> None:
        super().__init__()
        self.first_frame_out = first_frame_out
        self.synthesized: list[tuple[str, bool]] = []
        """Each sentence, and whether the first frame was out when its synthesis ended."""

    def _speak(self, sentence: str) -> np.ndarray:
        if self.synthesized:  # not the first sentence
            self.first_frame_out.wait(timeout=30)
        samples = super()._speak(sentence)
        self.synthesized.append((sentence, self.first_frame_out.is_set()))
        return samples


async def test_a_two_sentence_reply_s_first_frame_is_out_before_its_second_is_synthesized():
    out = threading.Event()
    synthesizer = GatedPiper(out)
    share_loaded_voice(synthesizer)
    published = Frames()
    sink = AudioTopicSink(published, synthesizer, first_frame=lambda *_: out.set())
    await sink.play(segment(f"{SENTENCE} {SECOND}"))
    assert synthesizer.synthesized == [(SENTENCE, False), (SECOND, True)]
    heard = await shared_stt().transcribe(published.samples())
    assert word_error_rate(f"{SENTENCE} {SECOND}", heard) <= 0.1, heard


async def test_a_cut_stops_the_frames_at_once_and_the_synthesis_ahead():
    published = Frames()
    sink = AudioTopicSink(published, piper())
    playing = asyncio.ensure_future(sink.play(segment(" ".join([SENTENCE, SECOND] * 3))))
    await asyncio.wait_for(published.first.wait(), 60)
    playing.cancel()
    await asyncio.gather(playing, return_exceptions=True)
    sent = len(published.frames)
    assert sent <= 2  # the first frame, and at most one frame period after the cut
    for _ in range(20):
        await asyncio.sleep(0)  # every task the sink left, if any, gets to run
    assert len(published.frames) == sent
    assert not [task for task in asyncio.all_tasks() if "_synthesize" in repr(task.get_coro())]


class StampedPiper(PiperSynthesizer):
    """The loaded Piper voice, noting when each sentence's synthesis began (Unix
    microseconds) and how many 20 ms frames its audio makes."""

    def __init__(self) -> None:
        super().__init__()
        share_loaded_voice(self)
        self.spoken: list[tuple[str, int, int]] = []
        self.second_started = threading.Event()
        self.second_done = threading.Event()

    def _speak(self, sentence: str) -> np.ndarray:
        began = now_us()
        if self.spoken:
            self.second_started.set()
        samples = super()._speak(sentence)
        pcm = float_to_pcm16(resample(samples, self.sample_rate, SAMPLE_RATE))
        self.spoken.append((sentence, began, len(list(frames(pcm)))))
        if len(self.spoken) > 1:
            self.second_done.set()
        return samples


async def test_a_streamed_reply_s_second_sentence_is_synthesized_while_the_first_is_heard():
    synthesizer, published = StampedPiper(), Frames()
    runtime = AgentRuntime()
    runtime.register(
        "renderer", VoiceRenderer(AudioTopicSink(published, synthesizer), sentences=True)
    )
    async with runtime:
        outputs = ResponseOutputs(runtime, VOICE_OUTPUT_TOPIC, source="conversation")
        async with outputs.reply("p1", request_id="t1") as reply:
            # A sentence is released once the next one begins (or the reply ends).
            await reply.send(f"{SENTENCE} The")
            await asyncio.wait_for(published.first.wait(), 60)  # the first sentence plays
            await reply.send(SECOND.removeprefix("The"))
        await asyncio.wait_for(published.done.wait(), 60)
    [(_, _, first_frames), (said, second_began_us, second_frames)] = synthesizer.spoken
    assert said == SECOND
    assert len(published.frames) == first_frames + second_frames
    first_last_us = published.frames[first_frames - 1].timestamp_us
    assert second_began_us < first_last_us, (
        f"the second sentence's synthesis began {(second_began_us - first_last_us) / 1000:.0f}"
        " ms after the first sentence's last frame"
    )


async def test_a_barge_in_cuts_the_sentence_playing_and_the_one_prepared_after_it():
    synthesizer, published = StampedPiper(), Frames()
    renderer = VoiceRenderer(
        AudioTopicSink(published, synthesizer), interrupted_topic=INTERRUPTED_TOPIC, sentences=True
    )
    runtime = AgentRuntime()
    runtime.register("renderer", renderer)
    async with runtime:
        outputs = ResponseOutputs(runtime, VOICE_OUTPUT_TOPIC, source="conversation")
        async with outputs.reply("p1", request_id="t1") as reply:
            await reply.send(f"{SENTENCE} The")
            await asyncio.wait_for(published.first.wait(), 60)
            await reply.send(f"{SECOND.removeprefix('The')} And there is more ")
            assert await asyncio.to_thread(synthesizer.second_started.wait, 60)
            await runtime.publish(
                INTERRUPTED_TOPIC, Interrupted(), participant_id="p1", source="voice"
            )
            await asyncio.wait_for(published.done.wait(), 60)
            sent = len(published.frames)
            # The prepared sentence's synthesis returns in its thread; its audio is dropped.
            assert await asyncio.to_thread(synthesizer.second_done.wait, 60)
            for _ in range(20):
                await asyncio.sleep(0)  # every task the sink left, if any, gets to run
            assert len(published.frames) == sent
    first_frames = synthesizer.spoken[0][2]
    assert sent < first_frames  # cut inside the first sentence; none of the second
    assert not renderer._ahead
    assert not [task for task in asyncio.all_tasks() if "_synthesize" in repr(task.get_coro())]


def test_the_bundled_voice_is_verified_and_a_changed_file_is_refused(tmp_path, monkeypatch):
    assert bundled_voice_path().name == "en_US-joe-medium.onnx"
    changed = tmp_path / "voice.onnx"
    changed.write_bytes(b"not a voice")
    with pytest.raises(ModelIntegrityError, match="refusing to load it"):
        verify_file(changed, "0" * 64)
    monkeypatch.setattr("xrmq.actors.voice.piper.BUNDLED_VOICE_SHA256", "0" * 64)
    with pytest.raises(ModelIntegrityError, match="en_US-joe-medium.onnx: SHA-256"):
        PiperSynthesizer().load()


def test_piper_is_the_default_voice_and_piper_path_names_another():
    default = builders.build_synthesizer(decode_config({}).voice)
    assert isinstance(default, PiperSynthesizer) and default.model_path is None
    other = builders.build_synthesizer(decode_config({"voice": {"tts": "piper:/v/a.onnx"}}).voice)
    assert isinstance(other, PiperSynthesizer) and other.model_path == Path("/v/a.onnx")
    with pytest.raises(FileNotFoundError, match="no Piper voice at /v/a.onnx"):
        other.load()


def test_without_piper_the_default_falls_back_to_espeak_and_a_named_piper_voice_fails(
    monkeypatch,
):
    monkeypatch.setattr(builders, "piper_available", lambda: False)
    assert isinstance(builders.build_synthesizer(decode_config({}).voice), EspeakSynthesizer)
    named = decode_config({"voice": {"tts": "piper:/v/a.onnx"}}).voice
    with pytest.raises(ModuleNotFoundError, match=r"needs Piper and onnxruntime: pip install"):
        builders.build_synthesizer(named)


def test_an_empty_piper_voice_path_is_refused_naming_the_field():
    with pytest.raises(ConfigError, match=r"voice\.tts.*'piper:PATH'"):
        decode_config({"voice": {"tts": "piper:"}})


def test_a_streaming_reply_is_released_a_sentence_at_a_time_for_speech():
    ordering = VoiceOrdering(sentences=True)

    def fragment(text: str, final: bool = False) -> None:
        message = ResponseOutput("reply", text, "r1", response_id="s1", final=final)
        ordering.query("p1", "r1")
        ordering.output("p1", "conversation", message, 0.0, "box")

    fragment(SENTENCE + " The kettle")
    taken = ordering.take("p1")
    assert isinstance(taken, Segment) and taken.text == SENTENCE
    ordering.finished(taken)
    fragment(" is set")
    assert ordering.take("p1") is None  # half a sentence waits
    fragment(" to eighty five degrees.", final=True)
    taken = ordering.take("p1")
    assert isinstance(taken, Segment) and taken.text == "The kettle is set to eighty five degrees."


def test_a_run_on_reply_is_released_at_a_word_break_once_it_grows_long():
    ordering = VoiceOrdering(sentences=True)
    ordering.query("p1", "r1")
    words = "and then " * (MAX_UNSPOKEN_CHARS // 9 + 1)
    message = ResponseOutput("reply", words + "more", "r1", response_id="s1", final=False)
    ordering.output("p1", "conversation", message, 0.0, "box")
    taken = ordering.take("p1")
    assert isinstance(taken, Segment) and taken.text == words.strip()


def test_sentences_split_after_their_end_and_closing_quotes():
    assert split_sentences('Hi. "Yes!" he said. Ok? fine') == [
        "Hi.",
        '"Yes!"',
        "he said.",
        "Ok?",
        "fine",
    ]
    assert split_sentences("drawer 12.5 of lab 3") == ["drawer 12.5 of lab 3"]
