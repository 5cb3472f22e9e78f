"""Voice output: the renderer actor, its pure ordering rules, and its sinks.

``VoiceRenderer`` subscribes to a ``ResponseOutput`` topic and plays it through a sink;
``VoiceOrdering`` holds the ordering rules on their own; ``xrmq listen`` (``commands``)
runs a renderer against a running bus.

The names are loaded on first use: importing ``VoiceOrdering`` does not load the
renderer, the runtime or ZeroMQ.
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

__all__ = sorted(_EXPORTS)

__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS)
