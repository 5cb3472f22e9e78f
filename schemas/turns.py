"""Turn records: where each turn's time went, its model usage and cost.

The router publishes one ``TurnRecord`` per turn on ``xrmq.turns``, after the turn's
``TurnEnded``, and logs it as one ``turn.done`` line. A destination that answers with a
model returns the stages only it sees (``DestinationStages``) inside its
``DestinationResult``, so they cross a process boundary with the result the router
already awaits: no message per stage, nothing per chunk.

Every timestamp is Unix microseconds from the wall clock of the process that took it
(one clock per host); ``crossed`` names the stages taken in another process than the
router's, whose difference to the router's own stages includes the clocks' offset when
the processes run on different hosts. A stage the turn did not pass through is absent
(None, and left off the wire), never zero.
"""

from __future__ import annotations

import msgspec

from .routing import TurnStatus
from .stages import CompactionTime, SectionSize, ToolCallTime, TurnUsage

STAGES: tuple[str, ...] = (
    "speech_start",
    "speech_end",
    "transcribed",
    "query",
    "received",
    "routed",
    "admitted",
    "model_request",
    "first_token",
    "first_chunk",
    "first_played",
    "first_frame",
    "last_frame",
    "ended",
)
"""A turn's stages in the order it passes them; ``TurnRecord`` has ``<stage>_us`` for
each. A spoken turn first: ``speech_start``, ``speech_end`` (its voiced audio began and
ended) and ``transcribed`` (its transcript was ready), from its ``UserQuery``. ``query``:
the ``UserQuery`` was published (its envelope time, the client's clock); ``received``:
the router took it; ``routed``: the router picked the destination; ``admitted``: the
destination's admission reached the router (a remote destination starts answering as it
admits, so its ``model_request`` may come first); ``model_request``: the destination sent
its model request; ``first_token``: the model's first text arrived; ``first_chunk``: the
destination published the reply's first chunk; ``first_played``: a voice renderer handed
the reply's first chunk to its sink; ``first_frame`` and ``last_frame``: the renderer's sink
put out the reply's first and last audio frame (a sink that plays no frames, like the
console's, has neither); ``ended``: the router ended the turn (just before its
``TurnEnded``). The playback stages are the renderer's (``PlaybackStages``): speech still
plays after the router ended the turn, so ``last_frame`` (and, for a short reply, the
others) usually comes after ``ended``, and a box with a renderer publishes the record once
the renderer reported (or, without them, ``routing.playback_join.PLAYBACK_WAIT_S`` after
the end)."""


class PlaybackStages(msgspec.Struct, frozen=True, omit_defaults=True):
    """What a voice renderer played of one turn's reply, sent to the router once the reply
    ended (played out, cut or dropped): ``turn_id`` is the reply's ``request_id``; the
    times are Unix microseconds of the renderer's clock (``STAGES``); a stage the reply did
    not pass is absent."""

    turn_id: str
    first_played_us: int | None = None
    first_frame_us: int | None = None
    last_frame_us: int | None = None
    first_text_us: int | None = None
    """When the chunk that completed the reply's first spoken piece was published (its
    envelope time: the producer's clock)."""
    synthesis_start_us: int | None = None
    """When the synthesis of the reply's first piece (its first sentence) began."""
    synthesis_end_us: int | None = None
    """When that synthesis returned the piece's audio."""


class TurnRecord(msgspec.Struct, frozen=True, omit_defaults=True):
    """One turn: who, where it went, how it ended, when it passed each stage (``STAGES``),
    and what the model used. ``turn_id`` is the ``UserQuery``'s message id (the
    ``TurnEnded.request_id``); ``router``: the runtime that routed it; ``crossed``: the
    stages whose time was taken in another process than ``router``."""

    turn_id: str
    participant_id: str
    status: TurnStatus
    route: str | None = None
    error: str | None = None
    router: str | None = None
    speech_start_us: int | None = None
    speech_end_us: int | None = None
    transcribed_us: int | None = None
    query_us: int | None = None
    received_us: int | None = None
    routed_us: int | None = None
    admitted_us: int | None = None
    model_request_us: int | None = None
    first_token_us: int | None = None
    first_chunk_us: int | None = None
    first_played_us: int | None = None
    first_frame_us: int | None = None
    last_frame_us: int | None = None
    ended_us: int | None = None
    model: str | None = None
    usage: TurnUsage | None = None
    tool_calls: tuple[ToolCallTime, ...] = ()
    crossed: tuple[str, ...] = ()
    client: str | None = None
    """The runtime that published the query (its ``MessageMetadata.sender``)."""
    destination: str | None = None
    """The runtime whose clock took the destination's stages (``DestinationStages.runtime``)."""
    traceparent: str | None = None
    """The query's W3C trace context when its publisher traces: the turn's trace joins it."""
    context: tuple[SectionSize, ...] = ()
    """The context the model request carried, per section against its budget (a destination
    whose context does not report it: none)."""
    renderer: str | None = None
    """The runtime whose clock took the playback stages (the voice renderer's)."""
    compactions: tuple[CompactionTime, ...] = ()
    """The compactions the turn caused in its destination (the tools destination's automatic
    compactions before its model calls), in order, on the destination's clock."""
    endpoint_us: int | None = None
    """A spoken turn: when its utterance was closed (``UserQuery.endpoint_us``)."""
    recognition_start_us: int | None = None
    """A spoken turn: when recognition of its last words began (``UserQuery``)."""
    recognition_end_us: int | None = None
    """A spoken turn: when that recognition returned (``UserQuery``)."""
    first_text_us: int | None = None
    """When the chunk completing the reply's first spoken piece was published
    (``PlaybackStages``)."""
    synthesis_start_us: int | None = None
    """When the renderer began synthesizing the reply's first piece (``PlaybackStages``)."""
    synthesis_end_us: int | None = None
    """When that synthesis returned (``PlaybackStages``)."""

    def stages(self) -> dict[str, int]:
        """The stages the turn passed, in ``STAGES`` order: name -> Unix microseconds."""
        found: dict[str, int] = {}
        for stage in STAGES:
            value = getattr(self, f"{stage}_us")
            if value is not None:
                found[stage] = value
        return found
