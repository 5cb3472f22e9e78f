"""Earlier turn ends: the words up to a pause are recognized while the hangover runs, and
end the turn at once when they end a sentence, never in the middle of one."""

from __future__ import annotations

import asyncio

import pytest

from xrmq.actors.edge.config_loader import decode_config
from xrmq.actors.runtime import Agent, AgentRuntime, RuntimeContext, subscribe
from xrmq.actors.voice.builders import voice_settings
from xrmq.actors.voice.endpoint import ends_sentence, ends_turn
from xrmq.actors.voice.listener import (
    VOICE_INPUT_KIND,
    VoiceInput,
    VoiceSettings,
    register_voice_input,
)
from xrmq.actors.voice.mic import FrameSender
from xrmq.actors.voice.pcm import float_to_pcm16
from xrmq.actors.voice.vad import Pause, SegmenterSettings, Utterance, UtteranceSegmenter
from xrmq.actors.voice.wer import word_error_rate, words
from xrmq.schemas import ContextBlock, UserQuery
from xrmq.topics import QUERY_TOPIC

from voice_support import np, shared_stt, spoken

CHUNK = np.zeros(512, np.float32)  # 32 ms


@pytest.mark.parametrize(
    "text, ends",
    [
        ("Where did I leave the spare key?", True),
        ("Turn the lights off.", True),
        ("Where did I leave the.", False),
        ("The fire drill starts at...", False),
        ("The fire drill starts at", False),
        ("My badge number is", False),
        ("So.", False),
        ('He said "stop."', True),
    ],
)
def test_the_words_so_far_end_a_turn_only_when_they_end_a_sentence(text, ends):
    assert ends_sentence(text) is ends


def test_a_sentence_with_more_words_than_its_speech_held_was_guessed_and_ends_no_turn():
    assert ends_turn("The fire drill starts at half past two.", 2.5)
    assert not ends_turn("The fire drill starts at half past two.", 1.4)
    assert ends_turn("Where did I leave the spare key?", 1.5)


def push(segmenter: UtteranceSegmenter, probabilities: list[float]) -> list:
    events: list = []
    for index, probability in enumerate(probabilities):
        events += segmenter.push(CHUNK, probability, index * 32_000)
    return events


def test_a_pause_is_reported_once_with_the_audio_so_far_and_finish_ends_the_utterance():
    settings = SegmenterSettings(pause_silence_s=0.1, trailing_silence_s=0.5)
    segmenter = UtteranceSegmenter(settings)
    events = push(segmenter, [0.9] * 20 + [0.0] * 5)  # 0.64 s of speech, 0.16 s of silence
    [pause] = [event for event in events if isinstance(event, Pause)]
    assert pause.audio.size == 24 * 512 and segmenter.pausing(pause)  # at 4 silent chunks
    utterance = segmenter.finish()
    assert isinstance(utterance, Utterance) and utterance.end_us == pause.end_us
    assert not segmenter.in_speech and segmenter.finish() is None


def test_speech_after_a_pause_means_the_pause_no_longer_holds():
    segmenter = UtteranceSegmenter(SegmenterSettings(pause_silence_s=0.1))
    events = push(segmenter, [0.9] * 20 + [0.0] * 5)
    [pause] = [event for event in events if isinstance(event, Pause)]
    segmenter.push(CHUNK, 0.9, 25 * 32_000)
    assert not segmenter.pausing(pause)


def test_a_pause_not_below_the_hangover_is_refused_and_the_box_turns_it_off():
    with pytest.raises(ValueError, match="pause_silence_s: must be >= 0 and < trailing"):
        SegmenterSettings(pause_silence_s=0.4, trailing_silence_s=0.4)
    voice = decode_config({"voice": {"trailing_silence_s": 0.2}}).voice
    assert voice_settings(voice).segmenter.pause_silence_s == 0.0
    assert voice_settings(decode_config({}).voice).segmenter.pause_silence_s == 0.2


class CountingSTT:
    """The shared recognizer, counting its recognitions."""

    def __init__(self) -> None:
        self.calls = 0

    async def transcribe(self, audio, prompt=None) -> str:
        self.calls += 1
        return await shared_stt().transcribe(audio, prompt)


class Queries(Agent):
    def __init__(self) -> None:
        self.queries: list[UserQuery] = []
        self.changed = asyncio.Event()

    @subscribe(QUERY_TOPIC)
    async def on_query(self, query: UserQuery, ctx: RuntimeContext) -> None:
        self.queries.append(query)
        self.changed.set()


SETTINGS = VoiceSettings(
    # A long hangover, so the recognition of the words up to the pause always finishes
    # within it on this machine: the rule on the words decides, not the recognizer's speed.
    segmenter=SegmenterSettings(pause_silence_s=0.2, trailing_silence_s=3.0),
    context_bias=True,
)
CONTEXT = (
    ContextBlock(None, "The spare key is in drawer 12. The fire drill starts at half past two."),
)


async def speak_with_pauses(tmp_path, pieces: list[str], pause_s: float):
    stt = CountingSTT()
    shared_stt()  # loaded before speaking: the recognition at a pause races the hangover
    runtime = AgentRuntime()
    register_voice_input(runtime, stt, settings=SETTINGS, context=lambda participant: CONTEXT)
    seen = runtime.register("queries", Queries())
    silence = np.zeros(round(pause_s * 16000), np.float32)
    audio = [np.zeros(4800, np.float32)]
    for index, piece in enumerate(pieces):
        audio += [spoken(tmp_path, f"piece-{index}", piece), silence]
    audio.append(np.zeros(round(3.5 * 16000), np.float32))  # past the hangover
    async with runtime:
        # In real time, past the hangover: every utterance has ended when this returns.
        await FrameSender(runtime, "p1").send(float_to_pcm16(np.concatenate(audio)))
        instance = runtime.keyed_instances(VOICE_INPUT_KIND)["p1"]
        assert isinstance(instance, VoiceInput)
        counts = await asyncio.wait_for(instance.wait_until(_all_recognized), 60)
    return seen.queries, counts, stt.calls


def _all_recognized(counts) -> bool:
    decided = counts.queries + counts.empty_transcripts + counts.backchannels
    return counts.utterances > 0 and decided + counts.stt_failures >= counts.utterances


@pytest.mark.timeout(120)
async def test_a_question_ends_the_turn_at_the_pause_recognized_once(tmp_path):
    queries, counts, calls = await speak_with_pauses(
        tmp_path, ["Where did I leave the spare key?"], 0.0
    )
    [query] = queries
    assert word_error_rate("Where did I leave the spare key?", query.text) <= 0.25, query.text
    assert counts.early_ends == 1 and counts.utterances == 1
    assert calls == 1  # the recognition at the pause is the utterance's: nothing decoded twice


@pytest.mark.timeout(120)
@pytest.mark.parametrize(
    "pieces",
    [
        ["Where did I leave the", "spare key?"],
        ["The fire drill starts at", "half past two."],
    ],
)
async def test_a_pause_inside_a_sentence_does_not_end_the_turn(tmp_path, pieces):
    queries, counts, _ = await speak_with_pauses(tmp_path, pieces, 1.2)
    assert counts.utterances == 1 and counts.early_ends <= 1  # at the sentence's own end
    [query] = queries
    first_s = spoken(tmp_path, "first", pieces[0]).size / 16000
    assert (query.speech_end_us - query.timestamp_us) / 1e6 > first_s + 1.2  # both pieces
    heard = words(query.text)
    assert heard[: len(words(pieces[0]))] == words(pieces[0]) and len(heard) > 5, query.text
