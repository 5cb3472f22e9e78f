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
import weakref
from collections.abc import Mapping
from typing import Any, Generic, TypeVar

import msgspec

from ._immutable import deeply_immutable

T = TypeVar("T")

SEP = b"\x00"
"""Ends each field of a wire key (the one separator: the runtime and the ACL use it too)."""

REGISTRY_CAPACITY = 4096
"""Topic names the registry holds for the process's life (the first ones bound: every
declared topic, and early reply names). A name beyond them is held only while a
``Topic`` of that name exists, so names taken from the bus (an inbox, a call's event
topic, a manager's report topic) cannot grow the registry without bound."""


class _Binding:
    """A name's message type, held by every ``Topic`` of that name."""

    __slots__ = ("__weakref__", "message_type")

    def __init__(self, message_type: type) -> None:
        self.message_type = message_type


_registry: dict[str, _Binding] = {}
_transient: weakref.WeakValueDictionary[str, _Binding] = weakref.WeakValueDictionary()
_overflowed = 0
_registry_lock = threading.Lock()
_encoder = msgspec.msgpack.Encoder()


def topic_key(name: str, participant_id: str | None) -> bytes:
    """The wire key of a message on ``name`` for ``participant_id`` (None: global)."""
    return name.encode() + SEP + (participant_id or "").encode() + SEP


def _bind(name: str, message_type: type) -> _Binding:
    """The binding of ``name``: the existing one, else a new one for ``message_type``."""
    global _overflowed
    with _registry_lock:
        binding = _registry.get(name) or _transient.get(name)
        if binding is None:
            binding = _Binding(message_type)
            if len(_registry) < REGISTRY_CAPACITY:
                _registry[name] = binding
            else:
                _overflowed += 1
                _transient[name] = binding
        return binding


def bound_topics() -> dict[str, type]:
    """Every topic name bound in this process, with its message type (a snapshot)."""
    with _registry_lock:
        bound = {name: binding.message_type for name, binding in _transient.items()}
        bound.update((name, binding.message_type) for name, binding in _registry.items())
        return bound


def registry_counts() -> dict[str, int]:
    """The registry's size: ``held`` names (at most ``REGISTRY_CAPACITY``), ``transient``
    ones (beyond it, alive while a ``Topic`` of theirs is) and ``overflowed``, how many
    names were ever bound beyond the capacity."""
    with _registry_lock:
        return {"held": len(_registry), "transient": len(_transient), "overflowed": _overflowed}


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
    message type raises ``ValueError``, in every process that declares both (for a name
    beyond ``REGISTRY_CAPACITY``: while the first exists). The topic owns a reused
    encoder and decoder for its payload type.
    """

    __slots__ = ("_binding", "_decoder", "_key_prefix", "message_type", "name", "shared")

    def __init__(self, name: str, message_type: type[T]) -> None:
        if not isinstance(name, str) or not name.strip():
            raise ValueError("Topic.name: must be a non-empty string, not only whitespace")
        if "\x00" in name:
            raise ValueError("Topic.name: must not contain NUL characters")
        if not (isinstance(message_type, type) and issubclass(message_type, msgspec.Struct)):
            raise ValueError("Topic.message_type: must be a msgspec.Struct subclass")
        binding = _bind(name, message_type)
        bound = binding.message_type
        if bound is not message_type:
            raise ValueError(
                f"Topic.name: {name!r} is already bound to {bound.__qualname__}, "
                f"not {message_type.__qualname__}"
            )
        self._binding = binding
        self.name = name
        self.message_type = message_type
        self.shared = deeply_immutable(message_type)
        """Whether one decoded message may be shared by every local subscriber: the type is
        deeply immutable (``deeply_immutable``, decided once per type). Otherwise each
        subscriber gets its own decode, so none can change another's message."""
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

    def encode(self, message: T | Mapping[str, Any]) -> bytes:
        """MessagePack bytes of ``message``, this topic's type or a mapping (``validate``)."""
        if type(message) is not self.message_type:
            message = self.validate(message)
        return _encoder.encode(message)

    def validate(self, message: T | Mapping[str, Any]) -> T:
        """``message`` as this topic's type: an instance as it is, a mapping converted with
        ``msgspec.convert`` (field names as on the wire; every field and constraint checked).

        ``ValueError`` naming the topic and the field when a mapping does not fit (a
        missing, mistyped or unknown field, a failed constraint); ``TypeError`` for
        anything else.
        """
        if type(message) is self.message_type:
            return message
        if isinstance(message, Mapping):
            carries = f"topic {self.name!r} carries {self.message_type.__qualname__}"
            kind: Any = self.message_type  # a msgspec.Struct subclass (checked in __init__)
            fields, tag_field = kind.__struct_encode_fields__, kind.__struct_config__.tag_field
            unknown = [key for key in message if key not in fields and key != tag_field]
            if unknown:  # a typo would otherwise drop a field silently (it has a default)
                raise ValueError(f"{carries}: no field {unknown[0]!r}; its fields are {fields}")
            try:
                return msgspec.convert(message, self.message_type)
            except msgspec.ValidationError as error:
                raise ValueError(f"{carries}: {error}") from error
        raise TypeError(
            f"topic {self.name!r} carries {self.message_type.__qualname__}, "
            f"not {type(message).__qualname__}"
        )

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
    """Require ``topic`` to be None or a ``Topic`` carrying exactly ``message_type``.

    ``ValueError("<label>: must be a Topic carrying <type>")`` otherwise: how a component's
    constructor checks the topics it is given.
    """
    if topic is not None and not (isinstance(topic, Topic) and topic.message_type is message_type):
        raise ValueError(f"{label}: must be a Topic carrying {message_type.__name__}")
