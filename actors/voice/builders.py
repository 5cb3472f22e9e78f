"""The voice objects ``[voice]`` describes: the recognizer, the listener's settings and
the speech-out sink.

The edge box's ``voice`` and ``renderer`` roles build them from a ``VoiceConfig``; they
need the voice extra (numpy, faster-whisper), which is why this is apart from ``config``.
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING

from xrmq.actors.runtime import AgentRuntime

from .audio_sink import AudioTopicSink, EspeakSynthesizer, LiteLLMSynthesizer
from .gate import GateSettings
from .listener import VoiceSettings
from .stt import LiteLLMSTT, SpeechToText, WhisperSTT
from .vad import SegmenterSettings

if TYPE_CHECKING:
    from .config import VoiceConfig


def build_stt(voice: VoiceConfig) -> SpeechToText:
    """The recognizer ``voice.stt`` names: bundled Whisper, a model directory, or litellm."""
    if voice.stt == "whisper":
        return WhisperSTT()
    if voice.stt.startswith("whisper:"):
        return WhisperSTT(voice.stt.removeprefix("whisper:"))
    api_key = os.environ.get(voice.api_key_env) if voice.api_key_env else None
    return LiteLLMSTT(voice.stt, api_base=voice.api_base, api_key=api_key)


def voice_settings(voice: VoiceConfig) -> VoiceSettings:
    return VoiceSettings(
        segmenter=SegmenterSettings(
            threshold=voice.vad_threshold,
            min_speech_s=voice.min_speech_s,
            trailing_silence_s=voice.trailing_silence_s,
            max_utterance_s=voice.max_utterance_s,
        ),
        gate=GateSettings(min_speech_s=voice.barge_in_min_s, min_words=voice.barge_in_min_words),
        context_bias=voice.context_bias,
    )


def speech_out_sink(runtime: AgentRuntime, voice: VoiceConfig) -> AudioTopicSink:
    """The renderer's sink for ``voice.speech_out``: ``voice.tts`` speech on ``audio.out``."""
    if voice.tts == "espeak":
        return AudioTopicSink(runtime.publish, EspeakSynthesizer())
    api_key = os.environ.get(voice.api_key_env) if voice.api_key_env else None
    return AudioTopicSink(
        runtime.publish,
        LiteLLMSynthesizer(
            voice.tts, voice=voice.tts_voice, api_base=voice.api_base, api_key=api_key
        ),
    )
