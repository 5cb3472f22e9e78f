"""Voice: the renderer actor, its pure ordering rules, and its sinks; speech in and out.

``VoiceRenderer`` subscribes to a ``ResponseOutput`` topic and plays it through a sink;
``VoiceOrdering`` holds the ordering rules on their own; ``config`` is ``[voice]``
(``VoiceConfig``), which the edge box composes into its config.

The voice front end needs the ``voice`` extra (numpy, faster-whisper), so its modules
are imported by name, not from here: ``listener`` (``VoiceInput``, the keyed ``voice``
actor), ``vad`` (the pure ``UtteranceSegmenter``) and ``silero`` (its VAD shell),
``stt`` (``WhisperSTT``, ``LiteLLMSTT``), ``gate`` (``BargeInGate``), ``bias``
(``bias_prompt``), ``audio_sink`` (``AudioTopicSink``), ``mic`` and ``playback``
(client sides), ``builders`` (the recognizer and speech-out sink ``[voice]`` names).
The commands and the demo (``xrmq listen``, ``xrmq mic``, ``xrmq demo --voice``) are the
edge box's.

The names below are loaded on first use (PEP 562, ``xrmq.actors._lazy``): importing the
pure ``VoiceOrdering`` does not load the renderer, its sinks, ZeroMQ or the runtime.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from xrmq.actors._lazy import lazy_exports

if TYPE_CHECKING:  # the same names, typed, for type checkers
    from .ordering import Cut, Dropped, ResponseEnded, Segment, StreamClosed, VoiceOrdering, Wake
    from .renderer import VoiceRenderer
    from .sinks import (
        DEFAULT_WORDS_PER_MINUTE,
        CallbackSink,
        ConsoleSink,
        EspeakSink,
        PacedSink,
        RecordingSink,
        Sink,
        SinkError,
        SinkUnavailableError,
        speaking_time,
    )

_EXPORTS = {
    "Cut": ".ordering",
    "Dropped": ".ordering",
    "ResponseEnded": ".ordering",
    "Segment": ".ordering",
    "StreamClosed": ".ordering",
    "VoiceOrdering": ".ordering",
    "Wake": ".ordering",
    "VoiceRenderer": ".renderer",
    "DEFAULT_WORDS_PER_MINUTE": ".sinks",
    "CallbackSink": ".sinks",
    "ConsoleSink": ".sinks",
    "EspeakSink": ".sinks",
    "PacedSink": ".sinks",
    "RecordingSink": ".sinks",
    "Sink": ".sinks",
    "SinkError": ".sinks",
    "SinkUnavailableError": ".sinks",
    "speaking_time": ".sinks",
}

__all__ = [
    "DEFAULT_WORDS_PER_MINUTE",
    "CallbackSink",
    "ConsoleSink",
    "Cut",
    "Dropped",
    "EspeakSink",
    "PacedSink",
    "RecordingSink",
    "ResponseEnded",
    "Segment",
    "Sink",
    "SinkError",
    "SinkUnavailableError",
    "StreamClosed",
    "VoiceOrdering",
    "VoiceRenderer",
    "Wake",
    "speaking_time",
]

__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS)
