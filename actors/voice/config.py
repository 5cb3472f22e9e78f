"""``[voice]``: the configuration of speech in (the ``voice`` role) and speech out.

The voice capability owns the description of its recognizer, segmenter, barge-in gate
and synthesizer; the edge box's config (``xrmq.actors.edge.config``) composes it and
decodes it with the rest of the file. ``VOICE_RANGES`` bounds every number;
``value_problem`` states the rule of a single value that says more than its range,
``voice_problem`` the rules across keys. ``builders`` makes the objects it describes.

Pure: msgspec only, so decoding a config does not load the voice extra (numpy, Whisper).
"""

from __future__ import annotations

from typing import Annotated

import msgspec

_NotNegative = Annotated[int, msgspec.Meta(ge=0)]
_Seconds = Annotated[float, msgspec.Meta(gt=0)]
_NotNegativeSeconds = Annotated[float, msgspec.Meta(ge=0)]


class VoiceConfig(msgspec.Struct, frozen=True, forbid_unknown_fields=True, kw_only=True):
    """The ``voice`` role (speech in) and the renderer's speech out (``actors/voice``)."""

    stt: str = "whisper"
    """``whisper`` (the bundled tiny.en weights), ``whisper:/path/to/model-dir`` (any
    faster-whisper model directory) or a litellm transcription model (``openai/whisper-1``)."""
    whisper_fit: bool = True
    """Whisper encodes only the utterance's own audio (and 5 s of silence), not a 30 s
    window: a short question is recognized several times faster, at the same word error
    rate on the tests' questions. ``false``: faster-whisper's padded 30 s window."""
    api_base: str | None = None
    """For a litellm model: the provider's base URL (a local OpenAI-compatible server)."""
    api_key_env: str | None = None
    """For a litellm model: the variable holding its key."""
    vad_threshold: float = 0.5
    min_speech_s: _NotNegativeSeconds = 0.25
    trailing_silence_s: _Seconds = 0.4
    sentence_end_silence_s: _NotNegativeSeconds = 0.2
    """A pause this long ends the turn at once when the words so far end a sentence or a
    question (recognized while the pause lasts); otherwise the turn ends after
    ``trailing_silence_s``. 0, or not below ``trailing_silence_s``: always the latter."""
    incremental_step_s: _NotNegativeSeconds = 0.0
    """Recognize while the participant speaks: decode the speech so far after each this
    much new speech (while the recognizer is idle) and commit the words two decodes agree
    on, so the end of speech decodes only the rest. 0: recognize at the end only. Whisper
    only (a litellm recognizer gives no word times)."""
    incremental_window_s: _Seconds = 8.0
    """The most audio a decode while speaking covers: words older than this are committed
    as last heard, so a long utterance costs no more per decode than this window."""
    max_utterance_s: float = 15.0
    barge_in_min_s: _NotNegativeSeconds = 0.6
    """Voiced seconds over the assistant's playback before the speech interrupts it."""
    barge_in_min_words: _NotNegative = 0
    """Words the transcript must also have to interrupt (0: duration alone)."""
    context_bias: bool = True
    """Give the recognizer the participant's context (names, numbers, places) as its prompt."""
    speech_out: bool = False
    """The ``renderer`` role speaks onto ``audio.out`` instead of the console."""
    tts: str = "piper"
    """Speech out: ``piper`` (Piper's neural ``en_US-joe-medium`` voice, offline, bundled with
    the voice extra; espeak-ng on a machine without Piper or onnxruntime), ``piper:PATH``
    (another Piper voice, ``PATH`` its ``.onnx``), ``espeak`` (espeak-ng, offline) or a
    litellm speech model (``openai/tts-1``, with ``api_base`` and ``api_key_env``)."""
    tts_voice: str = "alloy"
    """The litellm speech model's voice."""


VOICE_RANGES: dict[str, tuple[float, float]] = {
    "vad_threshold": (0.15, 1),
    "min_speech_s": (0, 60),
    "trailing_silence_s": (0.001, 60),
    "sentence_end_silence_s": (0, 60),
    "incremental_step_s": (0, 30),
    "incremental_window_s": (1, 30),
    "max_utterance_s": (0.001, 3600),
    "barge_in_min_s": (0, 60),
    "barge_in_min_words": (0, 1000),
}
"""The inclusive range of each number of ``[voice]``, by field."""


def value_problem(voice: VoiceConfig) -> tuple[str, str] | None:
    """``(field, rule)`` when ``vad_threshold`` is outside the open interval (0.15, 1);
    None otherwise. Checked before the ranges, whose ends are inclusive."""
    if not 0.15 < voice.vad_threshold < 1.0:
        return "vad_threshold", "must be in (0.15, 1)"
    return None


def voice_problem(voice: VoiceConfig) -> tuple[str, str] | None:
    """The first rule across ``[voice]``'s keys that ``voice`` breaks, as ``(field, rule)``;
    None when it keeps them all."""
    if not voice.stt.strip() or voice.stt == "whisper:":
        return "stt", "must be 'whisper', 'whisper:DIR' or a litellm model string"
    if not voice.tts.strip() or voice.tts == "piper:":
        return "tts", "must be 'piper', 'piper:PATH', 'espeak' or a litellm model string"
    if not voice.max_utterance_s > voice.min_speech_s:
        return "max_utterance_s", "must be > voice.min_speech_s"
    return None
