"""The registry: the actors one runtime hosts, the routing table to them, and keyed instances.

``register``/``register_keyed`` build the routing table (``routes.py``) before ``start()``;
the reader (``receiver.py``, the hot path) only reads it, and spawns a keyed instance on its
first message (``keyed_targets``). A registration also registers the companion actors the
register hooks add (``agent.add_register_hook``: the tools package serves an agent's tools).
The registry knows its host only as a ``MailboxHost`` (what the mailboxes it builds need) and
an ``AgentHost`` (what its actors see).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import TypeVar

from xrmq.schemas._validation import check_positive, is_name

from .agent import Agent, AgentHost, Handlers, check_handlers, companions, subscriptions
from .mailbox import Mailbox, MailboxHost
from .routes import KeyedKind, Route, shard_of

_AgentT = TypeVar("_AgentT", bound=Agent)

DEFAULT_KEYED_INSTANCES = 4096
"""Live instances of one keyed kind in one runtime; the least recently used idle one is
retired (``on_stop``) beyond."""


class Registry:
    """What one runtime hosts; see the module docstring. ``closed`` is set when the runtime
    stops: nothing is registered or spawned after it."""

    def __init__(
        self,
        host: MailboxHost,
        runtime: AgentHost,
        mailbox_capacity: int,
        max_keyed_instances: int,
        count_eviction: Callable[[str], None],
    ) -> None:
        check_positive(mailbox_capacity, "mailbox_capacity")
        check_positive(max_keyed_instances, "keyed_instances")
        self._host = host
        self._runtime = runtime
        """The host as agents see it (``Agent.runtime``)."""
        self._count_eviction = count_eviction
        self.mailbox_capacity = mailbox_capacity
        self.max_keyed_instances = max_keyed_instances
        self.closed = False
        self.agents: dict[str, Mailbox] = {}
        self.keyed: dict[str, KeyedKind] = {}
        self.routes: dict[bytes, list[Route]] = {}
        """Routes by topic name, where every delivery may share one decoded message."""
        self.private_routes: dict[bytes, list[Route]] = {}
        """Routes of topics whose type is not deeply immutable and that reach more than one
        delivery here: each delivery gets its own decode (``Receiver.dispatch_private``)."""
        self.subscriptions: set[bytes] = set()
        self.retiring: set[asyncio.Task[None]] = set()

    def register(
        self,
        name: str,
        agent: _AgentT,
        *,
        participant_id: str | None = None,
        mailbox_capacity: int | None = None,
    ) -> _AgentT:
        """``AgentRuntime.register``."""
        self._check_registrable(name)
        if not isinstance(agent, Agent):
            raise TypeError(f"register: {name!r} must be an Agent, got {type(agent).__qualname__}")
        if participant_id is not None and not is_name(participant_id, blank=False):
            raise ValueError(
                "register: participant_id must be a non-empty string without NUL, "
                "not only whitespace"
            )
        handlers = check_handlers(type(agent), agent.handlers())
        beside = companions(name, agent)
        for companion, _ in beside:
            self._check_registrable(companion)
        mailbox = Mailbox(
            self._host, self._runtime, agent, name, mailbox_capacity or self.mailbox_capacity
        )
        agent.name, agent.runtime = name, self._runtime
        self.agents[name] = mailbox
        pid = participant_id.encode() if participant_id is not None else None
        for topic, handler_name in handlers:
            self._add_route(
                Route(topic, handler_name, mailbox=mailbox, participant=pid),
                topic.subscription(participant_id),
            )
            if participant_id is not None:
                self.subscriptions.add(topic.key(None))
        for companion, companion_agent in beside:
            self.register(companion, companion_agent)
        agent.on_register()
        return agent

    def register_keyed(
        self,
        kind: str,
        agent_type: type[Agent],
        *,
        factory: Callable[[str], Agent] | None = None,
        shard: int = 0,
        shards: int = 1,
        mailbox_capacity: int | None = None,
        handlers: Handlers | None = None,
        max_instances: int | None = None,
    ) -> None:
        """``AgentRuntime.register_keyed``."""
        self._check_registrable(kind)
        if not (isinstance(agent_type, type) and issubclass(agent_type, Agent)):
            raise TypeError(f"register_keyed: {kind!r} needs an Agent subclass")
        if not 0 <= shard < shards:
            raise ValueError(f"register_keyed: shard must be in [0, {shards}), got {shard}")
        keyed = KeyedKind(
            kind,
            factory or agent_type,
            shard,
            shards,
            mailbox_capacity or self.mailbox_capacity,
            max_instances or self.max_keyed_instances,
        )
        self.keyed[kind] = keyed
        if handlers is None:
            handlers = subscriptions(agent_type)
        chosen = check_handlers(agent_type, handlers)
        for topic, handler_name in chosen:
            self._add_route(Route(topic, handler_name, keyed=keyed), topic.subscription())

    def _check_registrable(self, name: str) -> None:
        if self._host.running or self.closed:
            raise RuntimeError("register: only before start()")
        if not is_name(name, blank=False):
            raise ValueError(
                "register: name must be a non-empty string without NUL, not only whitespace"
            )
        if name in self.agents or name in self.keyed:
            raise ValueError(f"register: name {name!r} is already registered")

    def _add_route(self, route: Route, subscription: bytes) -> None:
        """Add a route to the table its topic belongs in: shared, unless the type is not
        deeply immutable and the topic reaches more than one delivery (two routes, or a
        keyed kind, whose global messages reach every live instance)."""
        name = route.topic.name.encode()
        routes = self.routes.pop(name, None) or self.private_routes.pop(name, None) or []
        routes.append(route)
        private = not route.topic.shared and (len(routes) > 1 or any(r.keyed for r in routes))
        (self.private_routes if private else self.routes)[name] = routes
        self.subscriptions.add(subscription)

    def spawn(self, kind: str, key: str) -> Agent:
        """``AgentRuntime.spawn``."""
        if not self._host.running:
            raise RuntimeError("spawn: only while the runtime runs")
        keyed = self.keyed[kind]
        if key not in keyed.instances and not keyed.owns(key):
            owner = shard_of(key, keyed.shards)
            raise ValueError(f"spawn: key {key!r} belongs to shard {owner}, not {keyed.shard}")
        return self.keyed_targets(keyed, key)[0].agent

    async def retire(self, kind: str, key: str, *, idle_only: bool = False) -> bool:
        """``AgentRuntime.retire``."""
        instances = self.keyed[kind].instances
        mailbox = instances.get(key)
        if mailbox is None or (idle_only and not mailbox.idle):
            return False
        del instances[key]
        await self._host.guarded_hook(mailbox.agent, "on_stop", mailbox)
        await mailbox.stop()
        return True

    def _retire_least_used(self, keyed: KeyedKind) -> None:
        """Retire one instance of a kind over its bound: the least recently used idle one
        (else the least recently used); its ``on_stop`` and mailbox stop run in a task."""
        instances = keyed.instances
        victim = next((key for key, mailbox in instances.items() if mailbox.idle), None)
        if victim is None:
            victim = next(iter(instances))
        mailbox = instances.pop(victim)
        self._count_eviction("keyed")

        async def retire() -> None:
            await self._host.guarded_hook(mailbox.agent, "on_stop", mailbox)
            await mailbox.stop()

        # spawned only while running, from the reader's callback: a loop is running
        task = asyncio.get_running_loop().create_task(retire(), name=f"xrmq-retire-{mailbox.name}")
        self.retiring.add(task)
        task.add_done_callback(self.retiring.discard)

    def keyed_targets(self, keyed: KeyedKind, key: str | None) -> list[Mailbox]:
        """The mailboxes a message of ``key`` (None: global) goes to; the instance of a key
        this shard owns is spawned on its first message."""
        instances = keyed.instances
        if key is None:
            return list(instances.values())
        mailbox = instances.pop(key, None)
        if mailbox is None:
            if self.closed or not keyed.owns(key):  # closed: no instance is spawned while stopping
                return []
            agent = keyed.factory(key)
            name = f"{keyed.kind}[{key}]"
            agent.name, agent.runtime = name, self._runtime
            mailbox = Mailbox(self._host, self._runtime, agent, name, keyed.capacity)
            mailbox.start(call_on_start=True)
            if len(instances) >= keyed.max_instances:
                self._retire_least_used(keyed)
        instances[key] = mailbox  # to the end: most recently used
        return [mailbox]

    def all_mailboxes(self) -> list[Mailbox]:
        """Every mailbox: the registered actors', then the live keyed instances'."""
        mailboxes = list(self.agents.values())
        for keyed in self.keyed.values():
            mailboxes.extend(keyed.instances.values())
        return mailboxes
