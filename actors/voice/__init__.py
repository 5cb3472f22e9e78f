"""Voice output: the renderer actor, its pure ordering rules, and its sinks.

``VoiceRenderer`` subscribes to a ``ResponseOutput`` topic and plays it through a sink;
``VoiceOrdering`` holds the ordering rules on their own; ``xrmq listen`` (``commands``)
runs a renderer against a running bus.
"""

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
