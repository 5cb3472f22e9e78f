"""Incremental recognition: the words two consecutive decodes agree on are committed, the
end of speech decodes only the rest, and a long utterance's decodes stay within a window."""

from __future__ import annotations

import asyncio

import pytest

from xrmq.actors.edge.config_loader import ConfigError, decode_config
from xrmq.actors.runtime import Agent, AgentRuntime, RuntimeContext, subscribe
from xrmq.actors.voice.builders import voice_settings
from xrmq.actors.voice.incremental import LocalAgreement, Word, repeated
from xrmq.actors.voice.listener import (
    VOICE_INPUT_KIND,
    VoiceInput,
    VoiceSettings,
    register_voice_input,
)
from xrmq.actors.voice.mic import FrameSender
from xrmq.actors.voice.pcm import FRAME_MS, float_to_pcm16, frames
from xrmq.actors.voice.vad import SegmenterSettings
from xrmq.actors.voice.wer import word_error_rate
from xrmq.schemas import ContextBlock, UserQuery
from xrmq.topics import QUERY_TOPIC

from voice_support import np, shared_stt, spoken


def hypothesis(text: str, start_s: float = 0.0, per_word_s: float = 0.3) -> list[Word]:
    return [
        Word(word, start_s + index * per_word_s, start_s + (index + 1) * per_word_s)
        for index, word in enumerate(text.split())
    ]


def test_only_the_words_two_consecutive_decodes_agree_on_are_committed():
    agreement = LocalAgreement()
    assert agreement.update(hypothesis("Tell me about the charging mess."), 2.0) == []
    committed = agreement.update(hypothesis("Tell me about the charging bay and"), 2.5)
    assert [word.text for word in committed] == ["Tell", "me", "about", "the", "charging"]
    assert agreement.decode_from_s == pytest.approx(1.5)  # after "charging"
    # The next decode starts after the committed words; its times are in utterance time.
    committed = agreement.update(hypothesis("bay and which pallet", 1.5), 3.0)
    assert [word.text for word in committed] == ["bay", "and"]
    assert agreement.text == "Tell me about the charging bay and"


def test_words_are_compared_without_case_and_punctuation():
    agreement = LocalAgreement()
    agreement.update(hypothesis("Where is the key?"), 1.5)
    committed = agreement.update(hypothesis("where is the key, and"), 2.0)
    assert [word.text for word in committed] == ["where", "is", "the", "key,"]


def test_a_decode_repeating_the_last_committed_words_at_its_start_is_not_doubled():
    agreement = LocalAgreement()
    agreement.update(hypothesis("the spare key"), 1.0)
    agreement.update(hypothesis("the spare key is"), 1.5)
    assert agreement.text == "the spare key"
    # The audio cut at "key"'s end still held its last sound: Whisper heard "key" again.
    assert agreement.finish("key is in drawer 12.") == "the spare key is in drawer 12."
    assert repeated("a b c", ["b", "c", "d"]) == 2 and repeated("a b", ["c"]) == 0


def test_the_transcript_is_the_tail_alone_when_nothing_was_committed():
    assert LocalAgreement().finish("Where did I leave the spare key?") == (
        "Where did I leave the spare key?"
    )


def test_a_long_utterance_never_decodes_more_than_its_window():
    agreement = LocalAgreement(window_s=3.0)
    # The decodes never agree (each hears different words): without a window the audio
    # left to decode would grow with the utterance.
    for step in range(1, 21):
        audio_s = step * 1.0
        start = agreement.decode_from_s
        heard = [
            Word(f"w{step}-{index}", start + index * 0.3, start + (index + 1) * 0.3)
            for index in range(round((audio_s - start) / 0.3))
        ]
        agreement.update(heard, audio_s)
        assert audio_s - agreement.decode_from_s <= 3.0 + 1e-9
    assert len(agreement.committed) > 30  # the words before the window were kept, as heard


def test_silence_without_words_moves_the_window_on():
    agreement = LocalAgreement(window_s=2.0)
    agreement.update([], 5.0)
    assert agreement.decode_from_s == pytest.approx(3.0)


def test_the_incremental_settings_are_range_checked_and_reach_the_listener():
    voice = decode_config({"voice": {"incremental_step_s": 0.5, "incremental_window_s": 6}})
    settings = voice_settings(voice.voice)
    assert (settings.incremental_step_s, settings.incremental_window_s) == (0.5, 6.0)
    with pytest.raises(ConfigError, match="incremental_window_s"):
        decode_config({"voice": {"incremental_window_s": 0.5}})
    with pytest.raises(ConfigError, match="incremental_step_s"):
        decode_config({"voice": {"incremental_step_s": -1}})
    with pytest.raises(ValueError, match="window_s: must be > 0"):
        LocalAgreement(window_s=0)


class RecordingSTT:
    """The shared recognizer, recording the seconds of audio of each kind of decode;
    ``idle`` is clear while a decode with word times runs."""

    def __init__(self) -> None:
        self.texts: list[float] = []
        self.words: list[float] = []
        self.idle = asyncio.Event()
        self.idle.set()

    async def transcribe(self, audio, prompt=None) -> str:
        self.texts.append(audio.size / 16000)
        return await shared_stt().transcribe(audio, prompt)

    async def transcribe_words(self, audio, prompt=None):
        self.words.append(audio.size / 16000)
        self.idle.clear()
        try:
            return await shared_stt().transcribe_words(audio, prompt)
        finally:
            self.idle.set()


async def send_paced_by_decodes(runtime: AgentRuntime, stt: RecordingSTT, pcm: bytes) -> None:
    """``pcm`` as frames a frame period apart, each once no decode while speaking runs: a
    recognizer as fast as the audio however loaded the machine is (the frames carry the
    audio's own times, so the listener hears the same speech either way)."""
    sender = FrameSender(runtime, "p1", realtime=False)
    for chunk in frames(pcm):
        await stt.idle.wait()
        await sender.send(chunk)
        await asyncio.sleep(FRAME_MS / 1000)


class Queries(Agent):
    def __init__(self) -> None:
        self.queries: list[UserQuery] = []
        self.arrived = asyncio.Event()

    @subscribe(QUERY_TOPIC)
    async def on_query(self, query: UserQuery, ctx: RuntimeContext) -> None:
        self.queries.append(query)
        self.arrived.set()


LONG = "Tell me about the forklift battery and the charging bay, and which pallet is next to Bob."
CONTEXT = (
    ContextBlock(
        None, "Forklift F2 battery is at 20 percent, charging at bay 4. Bob is next to pallet P-12."
    ),
)


@pytest.mark.timeout(180)
async def test_words_are_committed_while_speaking_and_the_end_decodes_only_the_rest(tmp_path):
    stt = RecordingSTT()
    shared_stt()
    runtime = AgentRuntime()
    settings = VoiceSettings(
        # A long hangover: every decode while speaking has finished before the end.
        segmenter=SegmenterSettings(trailing_silence_s=3.0),
        incremental_step_s=1.0,
    )
    register_voice_input(runtime, stt, settings=settings, context=lambda participant: CONTEXT)
    seen = runtime.register("queries", Queries())
    speech = spoken(tmp_path, "long", LONG)
    audio = [np.zeros(4800, np.float32), speech, np.zeros(round(3.5 * 16000), np.float32)]
    async with runtime:
        await send_paced_by_decodes(runtime, stt, float_to_pcm16(np.concatenate(audio)))
        instance = runtime.keyed_instances(VOICE_INPUT_KIND)["p1"]
        assert isinstance(instance, VoiceInput)
        counts = await asyncio.wait_for(instance.wait_until(lambda c: c.queries >= 1), 60)
        await asyncio.wait_for(seen.arrived.wait(), 10)
    [query] = seen.queries
    assert word_error_rate(LONG, query.text) <= 0.25, (query.text, stt.texts, stt.words, counts)
    assert counts.incremental_decodes >= 2 and counts.committed_words >= 3, counts
    [tail_s] = stt.texts  # one decode at the end, of the audio after the committed words
    assert tail_s < speech.size / 16000 - 1.0, (tail_s, stt.words)
    assert max(stt.words) <= settings.incremental_window_s + 1.0


class WordsFailSTT(RecordingSTT):
    """The shared recognizer, whose decodes with word times fail."""

    async def transcribe_words(self, audio, prompt=None):
        raise RuntimeError("no word times")


@pytest.mark.timeout(180)
async def test_a_failed_decode_while_speaking_is_counted_and_the_end_decodes_it_all(tmp_path):
    stt = WordsFailSTT()
    shared_stt()
    runtime = AgentRuntime()
    settings = VoiceSettings(
        segmenter=SegmenterSettings(trailing_silence_s=0.6), incremental_step_s=1.0
    )
    register_voice_input(runtime, stt, settings=settings, context=lambda participant: CONTEXT)
    seen = runtime.register("queries", Queries())
    speech = spoken(tmp_path, "long", LONG)
    audio = [np.zeros(4800, np.float32), speech, np.zeros(round(1.5 * 16000), np.float32)]
    async with runtime:
        await FrameSender(runtime, "p1").send(float_to_pcm16(np.concatenate(audio)))
        instance = runtime.keyed_instances(VOICE_INPUT_KIND)["p1"]
        assert isinstance(instance, VoiceInput)
        counts = await asyncio.wait_for(instance.wait_until(lambda c: c.queries >= 1), 60)
        await asyncio.wait_for(seen.arrived.wait(), 10)
    [query] = seen.queries
    assert counts.stt_failures >= 2 and counts.incremental_decodes == 0, counts
    assert word_error_rate(LONG, query.text) <= 0.25, query.text
    assert stt.texts[-1] >= speech.size / 16000  # the whole utterance, nothing committed
