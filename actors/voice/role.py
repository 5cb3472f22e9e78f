"""The edge box's ``voice`` role and the renderer's speech-out sink, built from ``[voice]``.

``voice_role`` hosts the keyed ``voice`` kind (one ``VoiceInput`` per participant on
``audio.in``, sharded over the process's replicas) with the recognizer the config names,
loaded before the process reports ready, and, when context topics are configured, a
split ``ContextManager`` replica whose ``blocks()`` bias the recognizer.
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING

from xrmq.actors.runtime import AgentRuntime

from .audio_sink import AudioTopicSink, EspeakSynthesizer, LiteLLMSynthesizer
from .gate import GateSettings
from .listener import VoiceSettings, register_voice_input
from .stt import LiteLLMSTT, SpeechToText, WhisperSTT
from .vad import SegmenterSettings

if TYPE_CHECKING:
    from xrmq.actors.edge.config import EdgeConfig, ProcessInstance, VoiceConfig


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


def voice_role(runtime: AgentRuntime, config: EdgeConfig, process: ProcessInstance) -> None:
    from xrmq.actors.context import ContextManager
    from xrmq.actors.edge.stack import plan_of
    from xrmq.actors.models import create_llm

    stt = build_stt(config.voice)
    if isinstance(stt, WhisperSTT):
        stt.load()  # once per process, before it reports ready
    context = None
    if config.voice.context_bias and config.context.topics:
        manager = ContextManager(
            create_llm(config.models.compaction),
            **config.context.manager_kwargs(),
            compaction_workers=plan_of(config).compaction_workers,
            deployment="split",
        )
        runtime.register("voice-context", manager.subscriber())
        context = manager.blocks
    register_voice_input(
        runtime,
        stt,
        settings=voice_settings(config.voice),
        context=context,
        shard=process.shard,
        shards=process.shards,
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
