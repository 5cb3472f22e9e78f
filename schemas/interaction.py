"""Transport-neutral participant interaction messages (docs/interaction.md).

Participant identity travels in the envelope (``MessageMetadata.participant_id``), never
in these payloads.
"""

from __future__ import annotations

from typing import Literal

import msgspec

from ._validation import require, require_image_urls, require_name


class UserQuery(msgspec.Struct, frozen=True, omit_defaults=True):
    """One accepted user query from an input boundary such as voice or text.

    A spoken query also says when the speech ended and when its transcript was ready
    (Unix microseconds, the voice input's clock), for the turn's record
    (``schemas/turns.py``); a typed one leaves them out.
    """

    text: str
    """Gate-accepted speech or direct typed text."""
    timestamp_us: int
    """Input presentation time as Unix microseconds (speech: when it began)."""
    speech_end_us: int | None = None
    """Speech: when its last voiced audio ended."""
    transcribed_us: int | None = None
    """Speech: when its transcript was ready."""
    images: tuple[str, ...] = ()
    """Images the query shows the model, as data URLs (``data:image/png;base64,...``) or
    http(s) URLs; a destination whose model does not accept images fails the turn."""
    endpoint_us: int | None = None
    """Speech: when the voice activity detector closed the utterance, on the clock of the
    audio frames (as ``speech_end_us``): its trailing silence is ``endpoint_us -
    speech_end_us``."""
    recognition_start_us: int | None = None
    """Speech: when recognition of the utterance's last words began (the voice input's clock)."""
    recognition_end_us: int | None = None
    """Speech: when that recognition returned (the voice input's clock)."""

    def __post_init__(self) -> None:
        require(bool(self.text.strip()), "UserQuery", "text", "must be non-empty text")
        require_image_urls(self.images, "UserQuery", "images")
        require(self.timestamp_us >= 0, "UserQuery", "timestamp_us", "must be >= 0")
        for name in (
            "speech_end_us",
            "transcribed_us",
            "endpoint_us",
            "recognition_start_us",
            "recognition_end_us",
        ):
            value = getattr(self, name)
            require(value is None or value >= 0, "UserQuery", name, "must be >= 0")


class Interrupted(msgspec.Struct, frozen=True):
    """Notification that participant-scoped or global work was interrupted."""


class ParticipantJoined(msgspec.Struct, frozen=True):
    """Notification that one participant joined the interaction."""


class ParticipantLeft(msgspec.Struct, frozen=True):
    """Notification that one participant left the interaction, and the request to forget
    them: the router forgets their turn history and focus and tells every destination,
    and confirms with ``ParticipantForgotten``."""


class ForgetFailure(msgspec.Struct, frozen=True):
    """A destination that did not confirm it forgot a participant: its ``route`` name and
    the cause as ``"<Kind>: <message>"`` (a timeout, the destination's own error)."""

    route: str
    error: str

    def __post_init__(self) -> None:
        require_name(self.route, "ForgetFailure", "route")
        require(bool(self.error.strip()), "ForgetFailure", "error", "must be non-empty text")


class ParticipantForgotten(msgspec.Struct, frozen=True):
    """The router's answer to a ``ParticipantLeft``: it forgot the participant (named in the
    envelope, like every interaction message) and asked each destination to forget them.

    ``request_id`` is the envelope ``message_id`` of the ``ParticipantLeft`` it answers
    (None when the router forgot the participant on its own, e.g. a rejoin). ``failed``
    names each destination that failed or did not answer in time: their state of the
    participant may remain. Empty: everything the box holds of them is gone.
    """

    request_id: str | None = None
    failed: tuple[ForgetFailure, ...] = ()

    def __post_init__(self) -> None:
        if self.request_id is not None:
            require_name(self.request_id, "ParticipantForgotten", "request_id")


ResponseKind = Literal["reply", "update", "withdraw"]


class ResponseOutput(msgspec.Struct, frozen=True, omit_defaults=True):
    """One complete response or one fragment of a streamed response.

    A ``reply`` answers ``request_id``; an ``update`` is unprompted information; a
    ``withdraw`` carries no content and asks the consumer to drop the updates this
    producer queued for the participant that have not started playing.

    Without ``response_id`` this is a complete standalone response. Otherwise ordered
    messages with the same participant, producer and ``response_id`` form one streamed
    reply: append each message's text until ``final=True`` closes it; the final message
    may carry text or be an empty terminator.

    Construction checks each message on its own (``__post_init__``);
    :meth:`validate_boundary` adds the rules for output crossing to a consumer. Stream
    state belongs to consumers.
    """

    kind: ResponseKind
    text: str = ""
    request_id: str | None = None
    urgent: bool = False
    response_id: str | None = None
    final: bool = True
    timestamp_us: int | None = None

    def __post_init__(self) -> None:
        # Runs for every fragment decoded off the bus: one cheap test on the common
        # path, and the rule-by-rule explanation only for a message that breaks one.
        kind = self.kind
        if kind == "reply":
            valid = bool(self.request_id) and not self.urgent
        else:
            valid = self.request_id is None and self.response_id is None and self.final
            if kind == "withdraw":
                valid = valid and self.text == "" and not self.urgent
        if (
            not valid
            or (self.timestamp_us is not None and self.timestamp_us < 0)
            or "\x00" in ((self.request_id or "") + (self.response_id or ""))
            or self.response_id == ""
        ):
            self._explain()

    def _explain(self) -> None:
        """Raise the ValueError of the first rule this message breaks."""
        name = "ResponseOutput"
        if self.kind == "reply":
            require(self.request_id is not None, name, "request_id", "is required for replies")
            require_name(self.request_id or "", name, "request_id")  # not None: required above
            require(not self.urgent, name, "urgent", "only updates can be urgent")
        else:
            require(self.request_id is None, name, "request_id", f"is forbidden for {self.kind}s")
            require(self.response_id is None, name, "response_id", "only replies are streamed")
            require(self.final, name, "final", "only replies are streamed")
        if self.kind == "withdraw":
            require(self.text == "", name, "text", "a withdraw carries no text")
            require(not self.urgent, name, "urgent", "only updates can be urgent")
        if self.response_id is not None:
            require_name(self.response_id, name, "response_id")
        if self.timestamp_us is not None:
            require(self.timestamp_us >= 0, name, "timestamp_us", "must be >= 0")

    def validate_boundary(self) -> ResponseOutput:
        """Require identity for streamed replies and text for finite output; return self."""
        name = "ResponseOutput"
        if not self.final:
            require(
                self.response_id is not None,
                name,
                "response_id",
                "is required for non-final fragments",
            )
        if self.response_id is None and self.kind != "withdraw":
            require(
                bool(self.text.strip()), name, "text", "is required for output without response_id"
            )
        return self
