"""Typed topics: a name bound to one schema, with its wire key and codec.

Wire key (frame 0 of ``[key, metadata, payload]``)::

    <topic name> NUL <participant id or empty> NUL

ZeroMQ subscriptions are byte prefixes. Subscribing to ``name NUL`` receives exactly
that topic (``notes`` never receives ``notes2``); subscribing to ``name NUL pid NUL``
receives exactly one participant. A global message (no participant) has an empty
participant field. Bytes after the second NUL mark a control frame (a readiness probe):
receivers that did not send it ignore it.
"""

from __future__ import annotations

import threading
from typing import Any, Generic, TypeVar

import msgspec

from xrmq.schemas._validation import require, require_name

T = TypeVar("T")

SEP = b"\x00"
"""Ends each field of a wire key."""

_registry: dict[str, type] = {}
_registry_lock = threading.Lock()
_encoder = msgspec.msgpack.Encoder()


def topic_key(name: str, participant_id: str | None) -> bytes:
    """The wire key of a message on ``name`` for ``participant_id`` (None: global)."""
    return name.encode() + SEP + (participant_id or "").encode() + SEP


def split_key(key: bytes) -> tuple[str, str | None, bytes]:
    """Split a wire key into (topic name, participant or None, control suffix).

    Raises ``ValueError`` for a key that does not follow the layout.
    """
    first = key.find(SEP)
    second = key.find(SEP, first + 1) if first >= 0 else -1
    if first <= 0 or second < 0:
        raise ValueError("key: must be <topic> NUL <participant> NUL")
    participant = key[first + 1 : second]
    return (
        key[:first].decode(),
        participant.decode() if participant else None,
        key[second + 1 :],
    )


class Topic(Generic[T]):
    """A topic name bound to one msgspec schema.

    Topic identity is the name: a second ``Topic`` with the same name and another
    message type raises ``ValueError``, in every process that declares both. The topic
    owns a reused encoder and decoder for its payload type.
    """

    __slots__ = ("name", "message_type", "_decoder", "_key_prefix")

    def __init__(self, name: str, message_type: type[T]) -> None:
        require(isinstance(name, str), "Topic", "name", "must be a non-empty string")
        require_name(name, "Topic", "name")
        if not (isinstance(message_type, type) and issubclass(message_type, msgspec.Struct)):
            raise ValueError("Topic.message_type: must be a msgspec.Struct subclass")
        with _registry_lock:
            bound = _registry.setdefault(name, message_type)
        if bound is not message_type:
            raise ValueError(
                f"Topic.name: {name!r} is already bound to {bound.__qualname__}, "
                f"not {message_type.__qualname__}"
            )
        self.name = name
        self.message_type = message_type
        self._decoder = msgspec.msgpack.Decoder(message_type)
        self._key_prefix = name.encode() + SEP

    def key(self, participant_id: str | None = None) -> bytes:
        """The wire key for a message on this topic."""
        if participant_id is None:
            return self._key_prefix + SEP
        return self._key_prefix + participant_id.encode() + SEP

    def subscription(self, participant_id: str | None = None) -> bytes:
        """The ZeroMQ subscription prefix: the whole topic, or one participant's messages."""
        return self._key_prefix if participant_id is None else self.key(participant_id)

    def encode(self, message: T) -> bytes:
        """MessagePack bytes of ``message``; ``TypeError`` if it is not this topic's type."""
        if type(message) is not self.message_type:
            raise TypeError(
                f"topic {self.name!r} carries {self.message_type.__qualname__}, "
                f"not {type(message).__qualname__}"
            )
        return _encoder.encode(message)

    def decode(self, payload: bytes) -> T:
        """Decode and validate a payload; raises ``msgspec.ValidationError`` or ``DecodeError``."""
        return self._decoder.decode(payload)

    def __repr__(self) -> str:
        return f"Topic({self.name!r}, {self.message_type.__qualname__})"

    def __eq__(self, other: Any) -> bool:
        return isinstance(other, Topic) and other.name == self.name

    def __hash__(self) -> int:
        return hash(self.name)


def check_topic(topic: object, message_type: type, label: str) -> None:
    """Require ``topic`` to be None or a ``Topic`` carrying ``message_type``.

    ``ValueError("<label>: must be a Topic carrying <type>")`` otherwise: a component's
    constructor checks the topics it is given this way.
    """
    if topic is not None and not (isinstance(topic, Topic) and topic.message_type is message_type):
        raise ValueError(f"{label}: must be a Topic carrying {message_type.__name__}")
