"""Typed topics: names bound to schemas, and the standard topics of the XR conversation layer."""

from typing import Any

from xrmq.schemas import (
    AudioFrame,
    AudioPlayback,
    BoxInfoRequest,
    ConversationContextUpdate,
    Interrupted,
    ParticipantForgotten,
    ParticipantJoined,
    ParticipantLeft,
    ResponseOutput,
    RuntimeMetrics,
    SupervisorReport,
    TurnEnded,
    TurnRecord,
    UserQuery,
)

from ._immutable import deeply_immutable
from ._topic import (
    REGISTRY_CAPACITY,
    SEP,
    Topic,
    bound_topics,
    check_topic,
    registry_counts,
    split_key,
    topic_key,
)

VOICE_OUTPUT_TOPIC: Topic[ResponseOutput] = Topic("voice.output", ResponseOutput)
"""Replies and updates that the voice renderer plays."""
QUERY_TOPIC: Topic[UserQuery] = Topic("voice.query", UserQuery)
"""Accepted user turns from voice or text input."""
INTERRUPTED_TOPIC: Topic[Interrupted] = Topic("voice.interrupted", Interrupted)
"""The participant interrupted (barge-in): in-flight work for them stops."""
PARTICIPANT_JOINED_TOPIC: Topic[ParticipantJoined] = Topic("participant.joined", ParticipantJoined)
PARTICIPANT_LEFT_TOPIC: Topic[ParticipantLeft] = Topic("participant.left", ParticipantLeft)
"""The participant left, or asks to be forgotten: the router forgets them everywhere."""
PARTICIPANT_FORGOTTEN_TOPIC: Topic[ParticipantForgotten] = Topic(
    "participant.forgotten", ParticipantForgotten
)
"""The router's ``ParticipantForgotten`` once every destination forgot a participant who left."""
TURN_ENDED_TOPIC: Topic[TurnEnded] = Topic("voice.turn_ended", TurnEnded)
"""The router's ``TurnEnded`` for each turn, participant-scoped: how it ended and why."""
TURNS_TOPIC: Topic[TurnRecord] = Topic("xrmq.turns", TurnRecord)
"""The router's ``TurnRecord`` for each turn, participant-scoped, after its ``TurnEnded``:
the time of each stage, model usage and cost; read by ``xrmq turns`` and ``xrmq top``."""
AUDIO_IN_TOPIC: Topic[AudioFrame] = Topic("audio.in", AudioFrame)
"""Microphone audio from each participant's client (20 ms PCM16 frames by default)."""
AUDIO_OUT_TOPIC: Topic[AudioFrame] = Topic("audio.out", AudioFrame)
"""Synthesized assistant speech for each participant, paced in real time."""
AUDIO_PLAYBACK_TOPIC: Topic[AudioPlayback] = Topic("audio.playback", AudioPlayback)
"""When a participant's assistant audio starts and stops playing."""
METRICS_TOPIC: Topic[RuntimeMetrics] = Topic("xrmq.metrics", RuntimeMetrics)
"""Every runtime's periodic counters (its heartbeat); read by ``xrmq top`` and the supervisor."""
SUPERVISOR_TOPIC: Topic[SupervisorReport] = Topic("xrmq.supervisor", SupervisorReport)
"""``xrmq up``'s report of every process it supervises (down ones too); read by ``xrmq top``."""
BOX_TOPIC: Topic[BoxInfoRequest] = Topic("xrmq.box", BoxInfoRequest)
"""Ask the running box about itself: ``xrmq up``'s supervisor replies with a ``BoxInfo``
(the config it runs, its destinations), for clients that have no ``--config``."""

ROUTER_SOURCE = "router"
"""The envelope ``source`` of the router's own text on ``VOICE_OUTPUT_TOPIC`` (an
acknowledgement, or a failure said instead of an answer): front ends tell it apart from a
destination's answer by this name."""


def context_topic(name: str) -> Topic[ConversationContextUpdate]:
    """The topic a sensor process publishes ``ConversationContextUpdate`` on."""
    return Topic(name, ConversationContextUpdate)


STANDARD_TOPICS: tuple[Topic[Any], ...] = (
    VOICE_OUTPUT_TOPIC,
    QUERY_TOPIC,
    INTERRUPTED_TOPIC,
    PARTICIPANT_JOINED_TOPIC,
    PARTICIPANT_LEFT_TOPIC,
    PARTICIPANT_FORGOTTEN_TOPIC,
    TURN_ENDED_TOPIC,
    TURNS_TOPIC,
    AUDIO_IN_TOPIC,
    AUDIO_OUT_TOPIC,
    AUDIO_PLAYBACK_TOPIC,
    METRICS_TOPIC,
    SUPERVISOR_TOPIC,
    BOX_TOPIC,
)

__all__ = [
    "AUDIO_IN_TOPIC",
    "AUDIO_OUT_TOPIC",
    "AUDIO_PLAYBACK_TOPIC",
    "BOX_TOPIC",
    "INTERRUPTED_TOPIC",
    "METRICS_TOPIC",
    "PARTICIPANT_FORGOTTEN_TOPIC",
    "PARTICIPANT_JOINED_TOPIC",
    "PARTICIPANT_LEFT_TOPIC",
    "QUERY_TOPIC",
    "REGISTRY_CAPACITY",
    "ROUTER_SOURCE",
    "SEP",
    "STANDARD_TOPICS",
    "SUPERVISOR_TOPIC",
    "TURNS_TOPIC",
    "TURN_ENDED_TOPIC",
    "VOICE_OUTPUT_TOPIC",
    "Topic",
    "bound_topics",
    "check_topic",
    "context_topic",
    "deeply_immutable",
    "registry_counts",
    "split_key",
    "topic_key",
]
