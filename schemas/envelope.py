"""The envelope: metadata frame carried beside every payload on the bus."""

from __future__ import annotations

from typing import Annotated

import msgspec

MAX_SEQ = 2**53
"""The largest sequence number a sender may use (a larger one is rejected as out of range)."""
MAX_EPOCH = 2**63 - 1
"""The largest epoch (receivers also reject one in the future beyond a clock-skew allowance)."""
TRACEPARENT = r"^[0-9a-f]{2}-[0-9a-f]{32}-[0-9a-f]{16}-[0-9a-f]{2}(-[0-9a-zA-Z.-]*)?$"
"""A W3C ``traceparent``: version, trace id, parent span id, flags (lowercase hex), and what a
later version appends."""


class MessageMetadata(msgspec.Struct, frozen=True, omit_defaults=True):
    """Metadata frame of one bus message (frame 1 of ``[key, metadata, payload]``).

    Field names are the wire names (MessagePack map keys); new fields are only ever
    appended, with defaults, so old and new peers interoperate. Its rules are msgspec
    constraints, checked in C when a frame is decoded (where untrusted input enters),
    not on construction: only the runtime builds envelopes.
    """

    message_id: Annotated[str, msgspec.Meta(min_length=1)]
    """Unique id of this message (uuid4 hex)."""
    source: str
    """Runtime-local name of the publishing agent; "application" for external publishes."""
    sender: str
    """Id of the publishing runtime instance; with ``epoch`` and ``seq`` it orders delivery."""
    epoch: Annotated[int, msgspec.Meta(ge=0, le=MAX_EPOCH)]
    """Incarnation of the sender; a restarted sender starts a new epoch."""
    seq: Annotated[int, msgspec.Meta(ge=1, le=MAX_SEQ)]
    """Per (sender, epoch, topic, participant) sequence number, starting at 1."""
    timestamp_us: int
    """Unix microseconds when the message was published."""
    correlation_id: str | None = None
    """Id shared by a message and everything published while handling it; ask/reply pairs use it."""
    parent_message_id: str | None = None
    """The message whose handler published this one."""
    participant_id: str | None = None
    """Participant the message concerns; None for a global message."""
    reply_to: str | None = None
    """Inbox topic of an asker that expects a reply."""
    error: str | None = None
    """On a reply: the handler failed with this description instead of returning a value."""
    traceparent: Annotated[str, msgspec.Meta(pattern=TRACEPARENT)] | None = None
    """The W3C trace context (``traceparent``) of the trace the message belongs to: set by a
    publisher (any language) that traces, and inherited by everything a handler publishes
    or replies while handling the message; the runtime never makes one up."""
