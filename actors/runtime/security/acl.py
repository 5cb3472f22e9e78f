"""Per-identity bus permissions and the broker's decision on each message and subscription.

Pure: no sockets, no clock, no files. The secure broker (``forwarder``) asks
``AccessPolicy.check_message`` about every message a publisher delivers and
``check_subscription`` about every subscription a subscriber sends, with the identity
ZAP authenticated for that connection (the ``User-Id`` of the frame). Only the key and
the metadata frame are read; the payload never is.

The rules:

- A runtime name (the metadata's ``sender``) belongs to the identity whose name is the
  longest one that equals it or prefixes it followed by ``-`` or ``.`` (``router``
  owns ``router``, ``router.1`` and ``router-5f3a``; ``sensor-2`` owns
  ``sensor-2-ab`` even though ``sensor`` is also an identity). A message whose sender
  belongs to another identity is dropped: no one can speak as another runtime.
- Inbox topics (``_inbox.<runtime>``) and private probe topics (``_probe.<runtime>``)
  may be subscribed to only by the identity that owns the runtime.
- ``publish`` and ``sources`` patterns bound the topics and ``source`` names of what an
  identity publishes; ``xrmq.metrics`` with source ``runtime`` (a runtime's own
  heartbeat, under its own sender) is always allowed.
- A ``reply_to`` must be the sender's own inbox. A message on an inbox (a reply) must
  answer an ask the broker forwarded (its ``correlation_id``), on a topic the replying
  identity may subscribe to: only a peer that could have received the request answers it.
- A control frame (a readiness probe: key with a suffix, empty metadata and payload)
  may go on any topic the identity may subscribe to, and on ``xrmq.capture`` for an
  identity with ``capture``.
- ``participants`` (None: every participant) binds an identity to the participants it
  may speak and listen as. Every message it publishes, probes and replies included, names
  in its key and its metadata either no participant (a global message) or one its
  patterns match; anything else is dropped. Its subscriptions are narrowed to what it may
  receive (``applied_subscriptions``): a whole-topic ``<topic> NUL`` becomes the topic's
  global messages (``<topic> NUL NUL``) plus one prefix per allowed participant
  (``<topic> NUL alice NUL``, or ``<topic> NUL guest-`` for ``guest-*``), and the broker
  applies those to the subscriber's connection instead, so its XPUB socket never sends it
  another participant's message. A subscription that can match none of them is denied.
  That is why a participant pattern, like a topic one, is a name, a prefix ending in
  ``*``, or ``*``: each is exactly one ZeroMQ subscription prefix. A bound identity never
  gets ``capture`` (the capture socket carries every participant's messages).

A pattern is a topic (or source) name, a prefix ending in ``*`` (``route.*``,
``context.topic.*``), or ``*`` alone for everything.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Iterable, Mapping

import msgspec

from xrmq.schemas import MessageMetadata
from xrmq.topics import SEP

INBOX_PREFIX = "_inbox."
PROBE_PREFIX = "_probe."
CAPTURE_PROBE_TOPIC = "xrmq.capture"
METRICS_TOPIC_NAME = "xrmq.metrics"
METRICS_SOURCE = "runtime"
PENDING_ASKS = 65_536
"""Asks remembered for reply authorization; the oldest is forgotten past this many."""

AS_PARTICIPANT = "may not speak as participant"
"""How the reason to drop a bound identity's message as another participant starts."""
_metadata = msgspec.msgpack.Decoder(MessageMetadata)
_UNDECIDED = object()
_REPLY = object()
"""Decision marker: a message on an inbox, judged per message by the ask it answers."""
_DECISIONS = 65_536
"""Decisions remembered per (identity, topic, sender, source); all forgotten past this many."""


class Permissions(msgspec.Struct, frozen=True, forbid_unknown_fields=True, kw_only=True):
    """What one identity may do on the bus (its inbox and heartbeat are always allowed)."""

    publish: list[str] = []
    """Topic patterns it may publish on."""
    sources: list[str] = []
    """``source`` patterns its messages may carry."""
    subscribe: list[str] = []
    """Topic patterns it may subscribe to."""
    capture: bool = False
    """Whether it may read the broker's capture socket (``xrmq record``)."""
    participants: list[str] | None = None
    """Participant patterns it may speak and listen as; None: every participant."""


class Patterns:
    """A compiled list of patterns: exact names, ``prefix*`` and ``*``."""

    __slots__ = ("everything", "exact", "prefixes")

    def __init__(self, patterns: Iterable[str]) -> None:
        patterns = list(patterns)
        for pattern in patterns:
            if not pattern or "\x00" in pattern or "*" in pattern[:-1]:
                raise ValueError(f"pattern {pattern!r}: a name, a prefix ending in '*', or '*'")
        self.everything = "*" in patterns
        self.exact = frozenset(p for p in patterns if not p.endswith("*"))
        self.prefixes = tuple(p[:-1] for p in patterns if p.endswith("*") and p != "*")

    def __contains__(self, name: str) -> bool:
        return self.everything or name in self.exact or name.startswith(self.prefixes)


class _Compiled:
    __slots__ = ("capture", "name", "participants", "publish", "sources", "subscribe")

    def __init__(self, name: str, permissions: Permissions) -> None:
        self.name = name
        self.publish = Patterns(permissions.publish)
        self.sources = Patterns(permissions.sources)
        self.subscribe = Patterns(permissions.subscribe)
        bound = permissions.participants
        self.participants = None if bound is None or "*" in bound else Patterns(bound)
        # the capture socket carries every participant's messages: never a bound identity's
        self.capture = permissions.capture and self.participants is None


def _speaks_as(
    participants: Patterns, key_participant: bytes, participant: str | None
) -> str | None:
    """Why a bound identity may not send a message of these participants (None: it may)."""
    name = key_participant.decode(errors="replace")
    if name and name not in participants:
        return f"{AS_PARTICIPANT} {name!r}"
    if participant and participant != name and participant not in participants:
        return f"{AS_PARTICIPANT} {participant!r}"
    return None


def _narrowed(participants: Patterns, topic: bytes, rest: bytes) -> list[bytes]:
    """The part of subscription ``<topic> NUL <rest>`` a bound identity may receive, as
    ZeroMQ prefixes (module docstring); [] if none."""
    whole = topic + SEP
    if SEP in rest:  # names one participant (empty: global messages)
        name = rest.partition(SEP)[0].decode(errors="replace")
        return [whole + rest] if not name or name in participants else []
    start = rest.decode(errors="replace")
    if start.startswith(participants.prefixes):
        return [whole + rest]  # every participant it can match is allowed
    applied = [whole + SEP] if not start else []
    covered = participants.prefixes
    applied += [
        whole + name.encode() + SEP
        for name in sorted(participants.exact)
        if name.startswith(start) and not name.startswith(covered)
    ]
    applied += [
        whole + prefix.encode()
        for prefix in dict.fromkeys(participants.prefixes)
        if prefix.startswith(start)
        and not any(prefix != other and prefix.startswith(other) for other in covered)
    ]
    return applied


class AccessPolicy:
    """The broker's per-identity decisions; each ``check_*`` returns None or the reason to drop.

    It remembers the asks it let through (bounded, ``PENDING_ASKS``) to authorize replies.
    """

    def __init__(
        self, identities: Mapping[str, Permissions], *, pending_asks: int = PENDING_ASKS
    ) -> None:
        self._identities: dict[str, _Compiled] = {}
        self._bound: dict[str, Patterns] = {}
        """The identities with ``participants``, checked on every message they send."""
        self._by_length: list[str] = []
        self._set(identities)
        self._owners: dict[str, str | None] = {}
        self._asks: OrderedDict[str, str] = OrderedDict()
        self._decisions: dict[tuple[str, bytes, str, str], object] = {}
        self._ask_limit = pending_asks

    def update(self, identities: Mapping[str, Permissions]) -> None:
        """Admit exactly ``identities`` from now on (a key added or removed since the start);
        the remembered decisions and runtime owners are forgotten, the pending asks kept."""
        self._set(identities)
        self._owners.clear()
        self._decisions.clear()

    def _set(self, identities: Mapping[str, Permissions]) -> None:
        self._identities = {name: _Compiled(name, perms) for name, perms in identities.items()}
        self._bound = {
            name: compiled.participants
            for name, compiled in self._identities.items()
            if compiled.participants is not None
        }
        self._by_length = sorted(self._identities, key=len, reverse=True)

    @property
    def identities(self) -> list[str]:
        return list(self._identities)

    def may_capture(self, identity: str) -> bool:
        compiled = self._identities.get(identity)
        return compiled is not None and compiled.capture

    def owner(self, runtime: str) -> str | None:
        """The identity a runtime name belongs to (see the module docstring), or None."""
        owner = self._owners.get(runtime, "")
        if owner != "":
            return owner
        owner = None
        for name in self._by_length:
            if runtime == name or (runtime.startswith(name) and runtime[len(name)] in "-."):
                owner = name
                break
        if len(self._owners) >= 65_536:  # external clients' random names: bounded
            self._owners.clear()
        self._owners[runtime] = owner
        return owner

    def may_subscribe(self, identity: str, topic: str) -> bool:
        """Whether ``identity`` may receive messages of ``topic``."""
        compiled = self._identities.get(identity)
        if compiled is None:
            return False
        for private in (INBOX_PREFIX, PROBE_PREFIX):
            if topic.startswith(private):
                return self.owner(topic[len(private) :]) == identity
        if topic == CAPTURE_PROBE_TOPIC:
            return compiled.capture
        return topic in compiled.subscribe

    def check_subscription(self, identity: str, prefix: bytes) -> str | None:
        """A subscription prefix must name a whole topic (``<topic> NUL``...) it may receive,
        and for a bound identity match a participant it may listen as (or global messages)."""
        topic, sep, rest = prefix.partition(SEP)
        if not sep or not topic:
            return "a subscription must name a whole topic (<topic> NUL)"
        name = topic.decode(errors="replace")
        if not self.may_subscribe(identity, name):
            return f"may not subscribe to {name!r}"
        bound = self._bound.get(identity)
        if bound is not None and not _narrowed(bound, topic, rest):
            start = rest.partition(SEP)[0].decode(errors="replace")
            if SEP in rest:
                return f"may not listen as participant {start!r}"
            return f"may not listen as participants starting {start!r}"
        return None

    def applied_subscriptions(self, identity: str, prefix: bytes) -> list[bytes]:
        """The prefixes the broker applies for ``identity``'s (permitted) subscription
        ``prefix``: ``prefix`` itself, or for a bound identity the part of it naming global
        messages and its participants (module docstring)."""
        bound = self._bound.get(identity)
        if bound is None:
            return [prefix]
        topic, sep, rest = prefix.partition(SEP)
        return _narrowed(bound, topic, rest) if sep else []

    def check_message(
        self, identity: str, key: bytes, metadata_frame: bytes | memoryview, payload_empty: bool
    ) -> str | None:
        """None if ``identity`` may publish this message, else why it is dropped.

        The decision on (identity, topic, sender, source) is remembered (bounded), so a
        stream of like messages costs a key split, a metadata decode and a dict lookup.
        """
        parts = key.split(SEP, 2)
        if len(parts) != 3 or not parts[0]:
            return "key must be <topic> NUL <participant> NUL"
        if parts[2]:
            return self._check_control(identity, parts, metadata_frame, payload_empty)
        try:
            metadata = _metadata.decode(metadata_frame)
        except (msgspec.DecodeError, msgspec.ValidationError):
            return "metadata does not decode"
        reply_to = metadata.reply_to
        if reply_to is not None and reply_to != INBOX_PREFIX + metadata.sender:
            return f"reply_to {reply_to!r} is not the sender's own inbox"
        slot = (identity, parts[0], metadata.sender, metadata.source)
        decision = self._decisions.get(slot, _UNDECIDED)
        if decision is _UNDECIDED:
            decision = self._decide(identity, parts[0].decode(errors="replace"), metadata)
            if len(self._decisions) >= _DECISIONS:
                self._decisions.clear()
            self._decisions[slot] = decision
        if decision is not None and decision is not _REPLY:
            return decision  # type: ignore[return-value]
        bound = self._bound.get(identity) if self._bound else None
        if bound is not None:
            refused = _speaks_as(bound, parts[1], metadata.participant_id)
            if refused is not None:
                return refused
        if decision is _REPLY:
            return self._check_reply(identity, metadata)
        if reply_to is not None:
            self._remember_ask(metadata.message_id, parts[0].decode(errors="replace"))
        return None

    def _decide(self, identity: str, topic: str, metadata: MessageMetadata) -> str | object | None:
        """The part of the decision that depends on identity, topic, sender and source only."""
        compiled = self._identities.get(identity)
        if compiled is None:
            return "unknown identity"
        if self.owner(metadata.sender) != identity:
            return f"sender {metadata.sender!r} is not a runtime of this identity"
        if topic.startswith(INBOX_PREFIX):
            return _REPLY
        if topic == METRICS_TOPIC_NAME and metadata.source == METRICS_SOURCE:
            return None
        if topic not in compiled.publish:
            return f"may not publish on {topic!r}"
        if metadata.source not in compiled.sources:
            return f"may not use source {metadata.source!r}"
        return None

    def _check_reply(self, identity: str, metadata: MessageMetadata) -> str | None:
        asked = self._asks.get(metadata.correlation_id or "")
        if asked is None:
            return "a reply to no ask the broker forwarded"
        if not self.may_subscribe(identity, asked):
            return f"a reply to an ask on {asked!r}, which it may not receive"
        return None

    def _check_control(
        self,
        identity: str,
        parts: list[bytes],
        metadata_frame: bytes | memoryview,
        payload_empty: bool,
    ) -> str | None:
        if len(metadata_frame) or not payload_empty:
            return "a control frame carries no metadata or payload"
        topic = parts[0].decode(errors="replace")
        if not self.may_subscribe(identity, topic):
            return f"probe on {topic!r}, which it may not subscribe to"
        bound = self._bound.get(identity)
        return _speaks_as(bound, parts[1], None) if bound is not None else None

    def _remember_ask(self, message_id: str, topic: str) -> None:
        asks = self._asks
        asks[message_id] = topic
        if len(asks) > self._ask_limit:
            asks.popitem(last=False)
