"""Live subscriptions per topic, as the broker sees them: the subscriber counts of ``xrmq topics``.

Pure: fed the subscription frames a broker's XPUB socket hands up (``\\x01`` + prefix to
subscribe, ``\\x00`` + prefix to unsubscribe; libzmq also hands up an unsubscription for
each prefix of a subscriber that goes away, with ``ZMQ_XPUB_VERBOSER`` or in manual
mode). A prefix counts for the topic it names (``voice.output\\x00p1\\x00`` is one
subscription of ``voice.output``); the private topics of every runtime are counted
together as ``_inbox.*`` and ``_probe.*``, and a prefix naming no whole topic (``b""``:
everything) as ``*``.

Bounded: at most ``limit`` topics are tracked; the subscriptions of any further topic
are counted together under ``OTHER``, so subscriptions to random names cannot grow it.
A count never goes below zero (an unsubscription of something never counted: a denied
subscription, or one made before the broker began counting).
"""

from __future__ import annotations

PRIVATE_PREFIXES = ("_inbox.", "_probe.")
EVERYTHING = "*"
OTHER = "<other>"
DEFAULT_LIMIT = 4096


def topic_of(prefix: bytes) -> str:
    """The topic a subscription prefix counts for (see the module docstring)."""
    topic, sep, _ = prefix.partition(b"\x00")
    if not sep:
        return EVERYTHING if not prefix else prefix.decode(errors="replace") + "*"
    name = topic.decode(errors="replace")
    for private in PRIVATE_PREFIXES:
        if name.startswith(private):
            return private + "*"
    return name


class SubscriptionCounts:
    """Live subscriptions by topic, from subscribe and unsubscribe frames."""

    def __init__(self, limit: int = DEFAULT_LIMIT) -> None:
        self._counts: dict[str, int] = {}
        self._limit = limit

    def frame(self, data: bytes) -> None:
        """Count one frame an XPUB socket handed up (anything else is ignored)."""
        if data[:1] == b"\x01":
            self.subscribed(data[1:])
        elif data[:1] == b"\x00":
            self.unsubscribed(data[1:])

    def subscribed(self, prefix: bytes) -> None:
        topic = topic_of(prefix)
        if topic not in self._counts and len(self._counts) >= self._limit:
            topic = OTHER
        self._counts[topic] = self._counts.get(topic, 0) + 1

    def unsubscribed(self, prefix: bytes) -> None:
        topic = topic_of(prefix)
        if topic not in self._counts:
            topic = OTHER
        count = self._counts.get(topic, 0) - 1
        if count > 0:
            self._counts[topic] = count
        else:
            self._counts.pop(topic, None)

    def snapshot(self) -> dict[str, int]:
        return dict(self._counts)
