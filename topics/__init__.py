"""Typed topics: names bound to schemas, and the standard topics of the XR conversation layer."""

from fnmatch import fnmatchcase
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
    PlaybackStages,
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
PLAYBACK_STAGES_TOPIC: Topic[PlaybackStages] = Topic("xrmq.playback", PlaybackStages)
"""A voice renderer's ``PlaybackStages`` for each reply it played, participant-scoped: the
router adds them to the turn's ``TurnRecord``."""
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

INTERNAL_TOPICS: tuple[str, ...] = (
    "_inbox.*",
    "_probe.*",
    "xrmq.*",
    "route.*",
    "context.*",
    "tools.*",
    "*.transcript.write",
    "*.transcript.load",
)
"""The runtime's own namespaces (fnmatch patterns), hidden by ``xrmq topics`` and ``xrmq
capture show`` unless ``--all``: what the box says to itself, never what a user publishes
or reads.

- ``_inbox.*``, ``_probe.*``: ask replies to a runtime and readiness probes (private topics,
  ``actors.runtime.subscriptions``);
- ``xrmq.*``: heartbeats (``METRICS_TOPIC``), the supervisor's reports, box info;
- ``route.*``: the router's calls to its destinations and their event streams;
- ``context.*``: the context actors' sections, views, replicas, hosts and compaction workers
  (``actors.context.messages.ContextTopics``, under the default namespace ``context``);
- ``tools.*``: calls to tool servers; ``*.transcript.write``, ``*.transcript.load``: a
  destination's transcript store.

A user's topics are the rest: queries, answers, audio, participant events and the context
topics sensors publish on (``notes``, ``scene``: ``context_topic``). A deployment that
renames the context namespace (``[context] namespace``) has its context traffic shown: the
rule holds names, not a config."""


def is_internal(topic: str) -> bool:
    """Whether ``topic`` is the runtime's own traffic (``INTERNAL_TOPICS``)."""
    return any(fnmatchcase(topic, pattern) for pattern in INTERNAL_TOPICS)


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
    PLAYBACK_STAGES_TOPIC,
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
    "INTERNAL_TOPICS",
    "INTERRUPTED_TOPIC",
    "METRICS_TOPIC",
    "PARTICIPANT_FORGOTTEN_TOPIC",
    "PARTICIPANT_JOINED_TOPIC",
    "PARTICIPANT_LEFT_TOPIC",
    "PLAYBACK_STAGES_TOPIC",
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
    "is_internal",
    "registry_counts",
    "split_key",
    "topic_key",
]
