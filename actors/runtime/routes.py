"""The routing table's entries: where a topic's messages go in one runtime, and keyed kinds.

``AgentRuntime.register``/``register_keyed`` build them before ``start()``; the reader
(``Receiver.dispatch``, the hot path) only reads them. ``shard_of`` is how every process
agrees which replica owns a key.
"""

from __future__ import annotations

import zlib
from collections.abc import Callable
from typing import TYPE_CHECKING

from xrmq.topics import Topic

from .agent import Agent

if TYPE_CHECKING:
    from .mailbox import Mailbox


class Route:
    """Where messages of one topic go in this runtime: a mailbox or a keyed kind.

    A registered actor's handler is bound once here, not looked up per message.
    """

    __slots__ = ("handler", "handler_name", "keyed", "mailbox", "participant", "topic")

    def __init__(
        self,
        topic: Topic,
        handler_name: str,
        *,
        mailbox: Mailbox | None = None,
        keyed: KeyedKind | None = None,
        participant: bytes | None = None,
    ) -> None:
        self.topic = topic
        self.handler_name = handler_name
        self.mailbox = mailbox
        self.handler = getattr(mailbox.agent, handler_name) if mailbox is not None else None
        self.keyed = keyed
        self.participant = participant


class KeyedKind:
    """A kind of actor spawned per key (the message's participant id) on first message."""

    __slots__ = ("capacity", "factory", "instances", "kind", "max_instances", "shard", "shards")

    def __init__(
        self,
        kind: str,
        factory: Callable[[str], Agent],
        shard: int,
        shards: int,
        capacity: int,
        max_instances: int,
    ) -> None:
        self.kind = kind
        self.factory = factory
        self.shard = shard
        self.shards = shards
        self.capacity = capacity
        self.max_instances = max_instances
        self.instances: dict[str, Mailbox] = {}
        """By key, least recently used first."""

    def owns(self, key: str) -> bool:
        return shard_of(key, self.shards) == self.shard


def shard_of(key: str, shards: int) -> int:
    """The shard that owns ``key``: a stable hash (CRC-32), the same in every process."""
    return zlib.crc32(key.encode()) % shards
