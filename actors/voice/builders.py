"""The voice objects ``[voice]`` describes: the recognizer, the listener's settings and
the speech-out sink.

The edge box's ``voice`` and ``renderer`` roles build them from a ``VoiceConfig``; they
need the voice extra (numpy, faster-whisper, Piper), which is why this is apart from
``config``. ``tts = "piper"`` (the default) falls back to espeak-ng, with a warning, on a
machine where Piper or onnxruntime does not import; ``piper:PATH`` names a voice, so it
fails instead.
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING

from xrmq.actors.runtime import AgentRuntime, get_logger

from .audio_sink import AudioTopicSink, EspeakSynthesizer, LiteLLMSynthesizer, Synthesizer
from .gate import GateSettings
from .listener import VoiceSettings
from .piper import VOICE_INSTALL, PiperSynthesizer, piper_available
from .stt import LiteLLMSTT, SpeechToText, WhisperSTT
from .vad import SegmenterSettings

if TYPE_CHECKING:
    from .config import VoiceConfig


def build_stt(voice: VoiceConfig) -> SpeechToText:
    """The recognizer ``voice.stt`` names: bundled Whisper, a model directory, or litellm."""
    if voice.stt == "whisper":
        return WhisperSTT(fit_audio=voice.whisper_fit)
    if voice.stt.startswith("whisper:"):
        return WhisperSTT(voice.stt.removeprefix("whisper:"), fit_audio=voice.whisper_fit)
    api_key = os.environ.get(voice.api_key_env) if voice.api_key_env else None
    return LiteLLMSTT(voice.stt, api_base=voice.api_base, api_key=api_key)


def voice_settings(voice: VoiceConfig) -> VoiceSettings:
    return VoiceSettings(
        segmenter=SegmenterSettings(
            threshold=voice.vad_threshold,
            min_speech_s=voice.min_speech_s,
            trailing_silence_s=voice.trailing_silence_s,
            max_utterance_s=voice.max_utterance_s,
            pause_silence_s=(
                voice.sentence_end_silence_s
                if voice.sentence_end_silence_s < voice.trailing_silence_s
                else 0.0
            ),
        ),
        gate=GateSettings(min_speech_s=voice.barge_in_min_s, min_words=voice.barge_in_min_words),
        context_bias=voice.context_bias,
        incremental_step_s=voice.incremental_step_s,
        incremental_window_s=voice.incremental_window_s,
    )


def build_synthesizer(voice: VoiceConfig) -> Synthesizer:
    """The synthesizer ``voice.tts`` names (see the module docstring)."""
    if voice.tts == "piper" or voice.tts.startswith("piper:"):
        if piper_available():
            return PiperSynthesizer(voice.tts.removeprefix("piper").removeprefix(":") or None)
        if voice.tts != "piper":
            raise ModuleNotFoundError(
                f"voice.tts = {voice.tts!r} needs Piper and onnxruntime: {VOICE_INSTALL}"
            )
        get_logger(component="voice").warning(
            "voice.tts_fallback", wanted="piper", using="espeak", install=VOICE_INSTALL
        )
        return EspeakSynthesizer()
    if voice.tts == "espeak":
        return EspeakSynthesizer()
    api_key = os.environ.get(voice.api_key_env) if voice.api_key_env else None
    return LiteLLMSynthesizer(
        voice.tts, voice=voice.tts_voice, api_base=voice.api_base, api_key=api_key
    )


def speech_out_sink(runtime: AgentRuntime, voice: VoiceConfig) -> AudioTopicSink:
    """The renderer's sink for ``voice.speech_out``: ``voice.tts`` speech on ``audio.out``,
    a Piper voice loaded (and the bundled one verified) before it returns."""
    synthesizer = build_synthesizer(voice)
    if isinstance(synthesizer, PiperSynthesizer):
        synthesizer.load()
    return AudioTopicSink(runtime.publish, synthesizer)
