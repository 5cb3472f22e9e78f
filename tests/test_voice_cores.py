"""The voice front end's pure cores, table-tested: segmenter, gate, biasing, WER, AudioFrame."""

from __future__ import annotations

import pytest

np = pytest.importorskip("numpy")

from xrmq.actors.voice.bias import bias_prompt, bias_terms  # noqa: E402
from xrmq.actors.voice.gate import BargeInGate, GateSettings  # noqa: E402
from xrmq.actors.voice.pcm import read_wav, resample, wav_bytes  # noqa: E402
from xrmq.actors.voice.vad import (  # noqa: E402
    Discarded,
    SegmenterSettings,
    SegmentEvent,
    SpeechStarted,
    Utterance,
    UtteranceSegmenter,
)
from xrmq.actors.voice.wer import word_error_rate  # noqa: E402
from xrmq.schemas import AudioFrame, ContextBlock  # noqa: E402

CHUNK = 512  # 32 ms at 16 kHz
SETTINGS = SegmenterSettings(
    threshold=0.5, min_speech_s=0.1, trailing_silence_s=0.1, pre_roll_s=0.064, max_utterance_s=1.0
)


def run(
    probabilities: list[float], settings: SegmenterSettings = SETTINGS
) -> list[tuple[int, SegmentEvent]]:
    """Feed one chunk per probability (chunk i holds the value i); return (chunk index, event)."""
    segmenter = UtteranceSegmenter(settings)
    events = []
    for index, probability in enumerate(probabilities):
        chunk = np.full(CHUNK, float(index), np.float32)
        for event in segmenter.push(chunk, probability, index * 32_000):
            events.append((index, event))
        assert (
            segmenter.held_samples
            <= (settings.max_utterance_s + settings.pre_roll_s) * 16000 + 2 * CHUNK
        )
    return events


@pytest.mark.parametrize(
    "name, probabilities, expected",
    [
        ("silence", [0.0] * 20, []),
        ("a click shorter than min speech", [0, 0, 0.9, 0, 0, 0, 0], [(6, "discarded")]),
        (
            "speech then hangover",
            [0, 0, 0.9, 0.9, 0.9, 0.9, 0, 0, 0, 0],
            [(5, "started"), (9, "utterance")],
        ),
        (
            "a pause shorter than the hangover keeps one utterance",
            [0.9] * 4 + [0, 0] + [0.9] * 3 + [0] * 4,
            [(3, "started"), (12, "utterance")],
        ),
        (
            "between the thresholds continues speech",
            [0.9] * 4 + [0.4] * 6 + [0] * 4,
            [(3, "started"), (13, "utterance")],
        ),
        (
            "max length cuts and goes on",
            [0.9] * 40 + [0] * 4,
            [(3, "started"), (31, "utterance"), (35, "started"), (43, "utterance")],
        ),
    ],
)
def test_segmenter_turns_probabilities_into_utterance_events(name, probabilities, expected):
    kinds = {SpeechStarted: "started", Utterance: "utterance", Discarded: "discarded"}
    assert [(index, kinds[type(event)]) for index, event in run(probabilities)] == expected


def test_an_utterance_carries_pre_roll_its_start_and_end_times_and_audio():
    [(_, started), (_, utterance)] = run([0, 0, 0, 0.9, 0.9, 0.9, 0.9, 0, 0, 0, 0])
    assert isinstance(utterance, Utterance) and started.start_us == utterance.start_us == 3 * 32_000
    assert utterance.end_us == 7 * 32_000 and not utterance.cut
    chunk_values = sorted(set(utterance.audio.tolist()))
    assert chunk_values[:2] == [1.0, 2.0]  # two chunks of pre-roll (64 ms)
    assert chunk_values[-1] == 10.0  # through the hangover


def test_reset_forgets_an_open_utterance():
    segmenter = UtteranceSegmenter(SETTINGS)
    for index in range(5):
        segmenter.push(np.zeros(CHUNK, np.float32), 0.9, index * 32_000)
    assert segmenter.in_speech and segmenter.held_samples > 0
    segmenter.reset()
    assert not segmenter.in_speech and segmenter.held_samples == 0


@pytest.mark.parametrize(
    "field, value",
    [
        ("threshold", 0.1),
        ("trailing_silence_s", 0.0),
        ("max_utterance_s", 0.05),
        ("min_speech_s", -1.0),
    ],
)
def test_segmenter_settings_name_the_field_they_refuse(field, value):
    with pytest.raises(ValueError, match=f"SegmenterSettings.{field}"):
        SegmenterSettings(**{"min_speech_s": 0.1, field: value})


@pytest.mark.parametrize(
    "settings, playing, voiced, words, during, verdict",
    [
        (GateSettings(0.6), False, [0.2, 1.0, 2.0], 6, [], "query"),
        (GateSettings(0.6), True, [0.2, 0.4], 1, [], "backchannel"),  # "yeah"
        (
            GateSettings(0.6),
            True,
            [0.2, 0.4, 0.7, 1.2],
            6,
            [2],
            "query",
        ),  # interrupted while speaking
        (GateSettings(0.6, min_words=3), True, [0.2, 0.7, 1.2], 6, [], "interrupt"),
        (
            GateSettings(0.6, min_words=3),
            True,
            [0.2, 0.7, 1.2],
            2,
            [],
            "backchannel",
        ),  # "okay okay"
        (
            GateSettings(0.6, min_words=3),
            True,
            [0.3],
            4,
            [],
            "backchannel",
        ),  # fast words, too short
    ],
)
def test_voice_gate_interrupts_only_past_the_minimum(
    settings, playing, voiced, words, during, verdict
):
    gate = BargeInGate(settings)
    gate.playback(playing)
    fired = [index for index, seconds in enumerate(voiced) if gate.voiced(seconds)]
    assert fired == during
    assert gate.finished(voiced[-1], words) == verdict
    assert gate.finished(0.0, 0) == ("backchannel" if playing else "query")  # state was reset


def test_voice_gate_counts_playback_that_starts_during_the_speech():
    gate = BargeInGate(GateSettings(0.5))
    assert not gate.voiced(0.3)
    gate.playback(True)
    assert gate.voiced(0.6)
    gate.playback(False)
    assert gate.finished(1.0, 5) == "query"


def test_bias_prompt_lists_names_numbers_and_places_then_the_newest_context():
    blocks = (
        ContextBlock(None, "Dana moved the kettle to Lab Three at 9 am."),
        ContextBlock(5, "The kettle is set to 85 degrees."),
    )
    terms = bias_terms(" ".join(block.text for block in blocks))
    assert {"Dana", "Lab Three", "85 degrees", "9 am"} <= set(terms)
    prompt = bias_prompt(blocks, max_chars=200)
    assert prompt is not None and prompt.startswith("Glossary: ") and prompt.endswith("85 degrees.")
    assert len(bias_prompt(blocks * 50, max_chars=200) or "") <= 200
    assert bias_prompt(()) is None


@pytest.mark.parametrize(
    "reference, hypothesis, expected",
    [
        ("Where did I leave the spare key?", "where did i leave the spare key", 0.0),
        ("Where did I leave the spare key?", "Well, did I leave the spare key?", 1 / 7),
        ("turn it off", "", 1.0),
        ("turn it off", "please turn it off now", 2 / 3),
    ],
)
def test_word_error_rate(reference, hypothesis, expected):
    assert word_error_rate(reference, hypothesis) == pytest.approx(expected)


def test_resampling_keeps_duration_and_a_tone_below_nyquist():
    rate = 22050
    t = np.arange(rate) / rate
    tone = (0.5 * np.sin(2 * np.pi * 440 * t)).astype(np.float32)
    out = resample(tone, rate)
    assert out.size == 16000
    spectrum = np.abs(np.fft.rfft(out))
    assert abs(int(np.argmax(spectrum)) - 440) <= 1
    back, back_rate = read_wav(wav_bytes(out))
    assert back_rate == 16000 and np.max(np.abs(back - out)) < 1e-3


@pytest.mark.parametrize(
    "kwargs, field",
    [
        ({"pcm": b"\0" * 3}, "pcm"),
        ({"sample_rate": 4000}, "sample_rate"),
        ({"channels": 3}, "channels"),
        ({"frame": -1}, "frame"),
        ({"timestamp_us": -5}, "timestamp_us"),
        ({"pcm": b"\0" * 40000}, "pcm"),
    ],
)
def test_audio_frame_names_the_field_it_refuses(kwargs, field):
    fields = {
        "pcm": b"\0" * 640,
        "sample_rate": 16000,
        "channels": 1,
        "frame": 0,
        "timestamp_us": 1,
        **kwargs,
    }
    with pytest.raises(ValueError, match=f"AudioFrame.{field}"):
        AudioFrame(**fields)
