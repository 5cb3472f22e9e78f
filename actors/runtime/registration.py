"""Registration and the lifecycle of keyed instances: what ``AgentRuntime`` hosts.

``register``/``register_keyed`` build the routing table (``routes.py``) before ``start()``;
the reader (``AgentRuntime._dispatch``, the hot path) only reads it, and spawns a keyed
instance on its first message (``_keyed_targets``). ``AgentRuntime`` inherits these methods
from ``Registration`` (their state is the runtime's own: ``_agents``, ``_keyed``,
``_routes``, ``_private_routes``, ``_subscriptions``), so its public API is one class.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import TYPE_CHECKING, TypeVar, cast

from xrmq.schemas._validation import is_name

from .agent import Agent, Handlers, check_handlers, subscriptions
from .mailbox import Mailbox
from .routes import KeyedKind, Route, shard_of

if TYPE_CHECKING:
    from xrmq.actors.tools.server import ToolServer

    from .runtime import AgentRuntime

_AgentT = TypeVar("_AgentT", bound=Agent)


class Registration:
    """The registration methods of ``AgentRuntime`` (see the module docstring); a base of
    ``AgentRuntime`` only."""

    if TYPE_CHECKING:  # the runtime's state these methods use (set by AgentRuntime.__init__)
        _running: bool
        _closed: bool
        _agents: dict[str, Mailbox]
        _keyed: dict[str, KeyedKind]
        _routes: dict[bytes, list[Route]]
        _private_routes: dict[bytes, list[Route]]
        _subscriptions: set[bytes]
        _retiring: set[asyncio.Task[None]]
        _loop: asyncio.AbstractEventLoop | None
        mailbox_capacity: int
        max_keyed_instances: int

        async def guarded_hook(
            self, agent: Agent, hook: str, mailbox: Mailbox | None = None
        ) -> None: ...

        def _count_eviction(self, table: str, count: int = 1) -> None: ...

    def register(
        self,
        name: str,
        agent: _AgentT,
        *,
        participant_id: str | None = None,
        mailbox_capacity: int | None = None,
    ) -> _AgentT:
        """Host ``agent`` under ``name``; only before ``start()``; returns ``agent``.

        ``participant_id`` filters its subscriptions at the socket to that participant's
        messages and global ones (a global message, such as an interruption of
        everyone, concerns every participant).
        """
        self._check_registrable(name)
        if not isinstance(agent, Agent):
            raise TypeError(f"register: {name!r} must be an Agent, got {type(agent).__qualname__}")
        if participant_id is not None and not is_name(participant_id, blank=False):
            raise ValueError(
                "register: participant_id must be a non-empty string without NUL, "
                "not only whitespace"
            )
        handlers = check_handlers(type(agent), agent.handlers())
        tool_server = self._tool_server_of(name, agent)
        runtime = cast("AgentRuntime", self)
        mailbox = Mailbox(runtime, agent, name, mailbox_capacity or self.mailbox_capacity)
        agent.name, agent.runtime = name, runtime
        self._agents[name] = mailbox
        pid = participant_id.encode() if participant_id is not None else None
        for topic, handler_name in handlers:
            self._add_route(
                Route(topic, handler_name, mailbox=mailbox, participant=pid),
                topic.subscription(participant_id),
            )
            if participant_id is not None:
                self._subscriptions.add(topic.key(None))
        if tool_server is not None:
            self.register(f"tools.{tool_server.server}", tool_server)
        agent.on_register()
        return agent

    def _tool_server_of(self, name: str, agent: Agent) -> ToolServer | None:
        """The ``ToolServer`` serving an ``Agent(tools=...)``'s tools, checked before
        anything is registered (so a bad name leaves the runtime as it was)."""
        if not agent.tools:
            return None
        from xrmq.actors.tools.server import ToolServer  # tools build on the runtime

        server = agent.tool_server or name
        try:
            tool_server = ToolServer(server, agent.tools)
        except ValueError as error:
            raise ValueError(
                f"register: {name!r} serves tools as tool server {server!r}: "
                f"{error}; name one with Agent(tool_server=...)"
            ) from None
        self._check_registrable(f"tools.{server}")
        return tool_server

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
        """Host a keyed kind: one ``agent_type`` instance per participant, spawned on first message.

        Several processes can host one kind; each owns the keys whose ``shard_of`` is its
        ``shard`` (of ``shards``). A global message (no participant) goes to every live
        instance in this runtime. ``factory(key)`` builds an instance (default
        ``agent_type(key)``). ``handlers`` maps topics to the class's handler functions
        (``{topic: Kind.on_write}``) when they come from configuration (default: the
        class's ``@subscribe`` methods). ``max_instances`` (default the runtime's
        ``keyed_instances``) bounds the live instances: beyond it the least recently used
        idle one is retired (``on_stop``), and counted (``evicted_by["keyed"]``).
        """
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
        self._keyed[kind] = keyed
        if handlers is None:
            handlers = subscriptions(agent_type)
        chosen = check_handlers(agent_type, handlers)
        for topic, handler_name in chosen:
            self._add_route(Route(topic, handler_name, keyed=keyed), topic.subscription())

    def _check_registrable(self, name: str) -> None:
        if self._running or self._closed:
            raise RuntimeError("register: only before start()")
        if not is_name(name, blank=False):
            raise ValueError(
                "register: name must be a non-empty string without NUL, not only whitespace"
            )
        if name in self._agents or name in self._keyed:
            raise ValueError(f"register: name {name!r} is already registered")

    def _add_route(self, route: Route, subscription: bytes) -> None:
        """Add a route to the table its topic belongs in: shared, unless the type is not
        deeply immutable and the topic reaches more than one delivery (two routes, or a
        keyed kind, whose global messages reach every live instance)."""
        name = route.topic.name.encode()
        routes = self._routes.pop(name, None) or self._private_routes.pop(name, None) or []
        routes.append(route)
        private = not route.topic.shared and (len(routes) > 1 or any(r.keyed for r in routes))
        (self._private_routes if private else self._routes)[name] = routes
        self._subscriptions.add(subscription)

    def agent(self, name: str) -> Agent:
        """The agent registered under ``name``; ``KeyError`` if there is none."""
        return self._agents[name].agent

    def keyed_instances(self, kind: str) -> dict[str, Agent]:
        """The live instances of a keyed kind in this runtime, by key."""
        return {key: mailbox.agent for key, mailbox in self._keyed[kind].instances.items()}

    def spawn(self, kind: str, key: str) -> Agent:
        """The live instance of keyed ``kind`` for ``key``, spawned now as a first message
        would spawn it (e.g. to restore state at start). Only while running;
        ``ValueError`` if this runtime's shard does not own ``key``."""
        if not self._running:
            raise RuntimeError("spawn: only while the runtime runs")
        keyed = self._keyed[kind]
        if key not in keyed.instances and not keyed.owns(key):
            owner = shard_of(key, keyed.shards)
            raise ValueError(f"spawn: key {key!r} belongs to shard {owner}, not {keyed.shard}")
        return self._keyed_targets(keyed, key)[0].agent

    async def retire(self, kind: str, key: str) -> bool:
        """Stop and forget the instance of ``kind`` for ``key``; True if there was one."""
        mailbox = self._keyed[kind].instances.pop(key, None)
        if mailbox is None:
            return False
        await self.guarded_hook(mailbox.agent, "on_stop", mailbox)
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
            await self.guarded_hook(mailbox.agent, "on_stop", mailbox)
            await mailbox.stop()

        if TYPE_CHECKING:  # instances are spawned only while running
            assert self._loop is not None
        task = self._loop.create_task(retire(), name=f"xrmq-retire-{mailbox.name}")
        self._retiring.add(task)
        task.add_done_callback(self._retiring.discard)

    def _keyed_targets(self, keyed: KeyedKind, key: str | None) -> list[Mailbox]:
        instances = keyed.instances
        if key is None:
            return list(instances.values())
        mailbox = instances.pop(key, None)
        if mailbox is None:
            if self._closed or not keyed.owns(key):  # closed: no instance is spawned while stopping
                return []
            agent = keyed.factory(key)
            name = f"{keyed.kind}[{key}]"
            runtime = cast("AgentRuntime", self)
            agent.name, agent.runtime = name, runtime
            mailbox = Mailbox(runtime, agent, name, keyed.capacity)
            mailbox.start(call_on_start=True)
            if len(instances) >= keyed.max_instances:
                self._retire_least_used(keyed)
        instances[key] = mailbox  # to the end: most recently used
        return [mailbox]
