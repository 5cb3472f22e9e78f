"""Agents, the ``subscribe`` decorator and the per-message ``RuntimeContext``.

An agent is an actor: private state, one mailbox, one message handled at a time.
Handlers are ``async def handler(self, message, ctx)`` methods tagged with
``@subscribe(topic)``; they return promptly and hand long work (an LLM stream) to tasks
the agent owns, started in ``on_start`` or from a handler and cancelled in ``on_stop``.

One way to wire a handler: by reference to the method. An actor whose topics come from
configuration overrides ``handlers()`` and maps each topic to its methods themselves
(``{topic: self.on_update}``), never to their names, so a rename is checked by tools
and a handler is never "unused"; a keyed kind's ``handlers=`` maps topics to the class's
functions (``{topic: Kind.on_write}``).
"""

from __future__ import annotations

import asyncio
import inspect
from collections import deque
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, Protocol, TypeVar

import msgspec

from xrmq.schemas import MessageMetadata, RuntimeMetrics
from xrmq.topics import Topic

from .annotations import EMPTY, admits, describe, message_annotation
from .scope import Scope

if TYPE_CHECKING:
    from .address import BusAddress
    from .security.keys import ClientCredentials
    from .sequence import Gap
    from .streams import ReplyStream

F = TypeVar("F", bound=Callable[..., Any])

Handler = Callable[..., Any]
"""A handler method: bound (``self.on_update``) or the class's function (``Kind.on_update``)."""
Handlers = Mapping[Topic, "Handler | Sequence[Handler]"]
"""What ``Agent.handlers()`` returns: each topic mapped to its handler method (or methods)."""

_TOPICS_ATTR = "__xrmq_topics__"
_POSITIONAL = (inspect.Parameter.POSITIONAL_ONLY, inspect.Parameter.POSITIONAL_OR_KEYWORD)


def subscribe(topic: Topic) -> Callable[[F], F]:
    """Tag an ``async def handler(self, message, ctx)`` method as a subscriber of ``topic``.

    Stackable: one handler may subscribe to several topics. Checked at ``register``.
    """
    if not isinstance(topic, Topic):
        raise TypeError(f"subscribe: expected a Topic, got {type(topic).__qualname__}")

    def decorate(func: F) -> F:
        setattr(func, _TOPICS_ATTR, (*getattr(func, _TOPICS_ATTR, ()), topic))
        return func

    return decorate


def subscriptions(agent_type: type) -> dict[Topic, tuple[Handler, ...]]:
    """Map each topic an agent class subscribes to (``@subscribe``) onto its handler functions.

    Two handlers of one class may subscribe to one topic: both are called, each with its
    own delivery, in name order. Raises ``TypeError`` for a handler that is not
    ``async def (self, message, ctx)``, whose message annotation does not admit its
    topic's type, or that subscribes to one topic twice.
    """
    found: dict[Topic, tuple[Handler, ...]] = {}
    for name, member in inspect.getmembers(agent_type, inspect.isfunction):
        for topic in getattr(member, _TOPICS_ATTR, ()):
            handlers = found.get(topic, ())
            if member in handlers:
                raise TypeError(
                    f"{agent_type.__qualname__}.{name}: subscribes to topic {topic.name!r} twice"
                )
            found[topic] = (*handlers, member)
    check_handlers(agent_type, found)
    return found


def _method_name(agent_type: type, handler: object, topic: Topic) -> str:
    """The name under which ``handler`` (a bound method or a function) is a method of
    ``agent_type``; ``TypeError`` for a name string or anything else."""
    owner = agent_type.__qualname__
    if isinstance(handler, str):
        raise TypeError(
            f"{owner}: topic {topic.name!r} is mapped to the name {handler!r}; a handler is "
            f"wired by reference, never by name: map it to the method itself "
            f"(self.{handler} or {owner}.{handler})"
        )
    function = getattr(handler, "__func__", handler)
    name = getattr(function, "__name__", None)
    if not isinstance(name, str) or getattr(agent_type, name, None) is not function:
        raise TypeError(
            f"{owner}: {handler!r} (topic {topic.name!r}) is no handler method of {owner}"
        )
    return name


def check_handlers(agent_type: type, handlers: Handlers) -> list[tuple[Topic, str]]:
    """Check each handler of ``agent_type``; the (topic, method name) pairs, in order.

    A topic maps to one handler method or a sequence of them (``Handlers``), never to a
    name. Each must be an ``async def (self, message, ctx)`` method of ``agent_type`` whose
    message annotation, if any, admits the topic's type (``annotations.admits``);
    otherwise ``TypeError`` naming the handler, the topic and both types.
    """
    pairs: list[tuple[Topic, str]] = []
    owner = agent_type.__qualname__
    for topic, chosen in handlers.items():
        if not isinstance(topic, Topic):
            raise TypeError(f"{owner}: handlers keys must be Topics, got {topic!r}")
        chosen_all = (chosen,) if callable(chosen) or isinstance(chosen, str) else tuple(chosen)
        if not chosen_all:
            raise TypeError(f"{owner}: topic {topic.name!r} is mapped to no handler")
        for handler in chosen_all:
            name = _method_name(agent_type, handler, topic)
            member = getattr(agent_type, name)
            if not inspect.isfunction(member):
                raise TypeError(f"{owner}.{name}: no such handler method")
            if not inspect.iscoroutinefunction(member):
                raise TypeError(f"{owner}.{name}: a subscriber must be 'async def'")
            params = list(inspect.signature(member).parameters.values())
            if len(params) != 3 or any(p.kind not in _POSITIONAL for p in params):
                raise TypeError(f"{owner}.{name}: a subscriber takes exactly (self, message, ctx)")
            annotation = message_annotation(member, agent_type)
            if annotation is not EMPTY and not admits(annotation, topic.message_type):
                raise TypeError(
                    f"{owner}.{name}: its message is annotated {describe(annotation)}, but topic "
                    f"{topic.name!r} carries {topic.message_type.__qualname__}"
                )
            pairs.append((topic, name))
    return pairs


RegisterHook = Callable[[str, "Agent"], Sequence[tuple[str, "Agent"]]]
"""A capability's part in ``AgentRuntime.register`` (``add_register_hook``): given the name
and the agent being registered, the companion actors to register beside it, each with its
name (none: empty). Raising ``ValueError`` refuses the registration before anything is
registered."""
ToolsCheck = Callable[[Sequence[Any], str], tuple[Any, ...]]
"""What checks ``Agent(tools=...)``: the tools as a tuple, or ``ValueError`` naming the owner."""

_register_hooks: list[RegisterHook] = []


def _no_tools(tools: Sequence[Any], owner: str) -> tuple[Any, ...]:
    """Before the tools package is imported no ``Tool`` exists: whatever was given is none."""
    raise ValueError(f"{owner}: every tool must be a Tool")


_tools_check: list[ToolsCheck] = [_no_tools]


def add_register_hook(hook: RegisterHook) -> None:
    """Extend every ``register`` with ``hook`` (once, however often it is added).

    The kernel knows nothing of the capabilities built on it: one that gives agents a
    feature at registration installs its hook when it is imported (the tools package
    serves ``Agent(tools=...)``'s tools as a tool server beside the agent).
    """
    if hook not in _register_hooks:
        _register_hooks.append(hook)


def companions(name: str, agent: Agent) -> list[tuple[str, Agent]]:
    """The companion actors the register hooks add to ``agent`` registered as ``name``."""
    return [companion for hook in _register_hooks for companion in hook(name, agent)]


def set_tools_check(check: ToolsCheck) -> None:
    """Check ``Agent(tools=...)`` with ``check`` (the tools package, when it is imported)."""
    _tools_check[0] = check


_HostedT = TypeVar("_HostedT", bound="Agent")


class AgentHost(Protocol):
    """The runtime as its actors see it (``Agent.runtime``, ``RuntimeContext.runtime``): the
    public API of ``AgentRuntime``, which is the one implementation. A protocol, so that the
    actors' module does not import the runtime that imports it; see ``AgentRuntime`` for
    each member's contract."""

    name: str
    address: BusAddress
    credentials: ClientCredentials | None
    epoch: int
    max_message_bytes: int
    gaps: deque[Gap]
    stopping: bool

    @property
    def running(self) -> bool: ...

    async def start(self) -> None: ...

    async def stop(self) -> None: ...

    async def publish(
        self,
        topic: Topic,
        message: Any,
        *,
        participant_id: str | Scope | None = None,
        source: str = ...,
    ) -> None: ...

    def send(
        self,
        topic: Topic,
        message: Any,
        *,
        participant_id: str | None = None,
        source: str = ...,
        correlation_id: str | None = None,
        parent_message_id: str | None = None,
        reply_to: str | None = None,
        traceparent: str | None = None,
    ) -> str: ...

    async def ask(
        self,
        topic: Topic,
        message: Any,
        *,
        reply_type: Any = ...,
        participant_id: str | Scope | None = None,
        source: str = ...,
        timeout: float = ...,
        correlation_id: str | None = None,
    ) -> Any: ...

    def request(
        self,
        topic: Topic,
        message: Any,
        *,
        reply_type: Any = ...,
        participant_id: str | Scope | None = None,
        source: str = ...,
        timeout: float = ...,
        correlation_id: str | None = None,
    ) -> asyncio.Task[Any]: ...

    def ask_stream(
        self,
        topic: Topic,
        message: Any,
        *,
        reply_type: Any = ...,
        participant_id: str | Scope | None = None,
        source: str = ...,
        timeout: float = ...,
        max_buffered: int = ...,
    ) -> ReplyStream[Any]: ...

    def reply(self, request: MessageMetadata, result: Any, *, error: str | None = None) -> None: ...

    def register(
        self,
        name: str,
        agent: _HostedT,
        *,
        participant_id: str | None = None,
        mailbox_capacity: int | None = None,
    ) -> _HostedT: ...

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
    ) -> None: ...

    def agent(self, name: str) -> Agent: ...

    def keyed_instances(self, kind: str) -> dict[str, Agent]: ...

    def spawn(self, kind: str, key: str) -> Agent: ...

    async def retire(self, kind: str, key: str, *, idle_only: bool = False) -> bool: ...

    def metrics(self, last_seq: dict[str, int] | None = None) -> RuntimeMetrics: ...


class Agent:
    """Base class of actors hosted by an ``AgentRuntime``.

    The runtime sets ``name`` and ``runtime`` when the agent is registered (or, for a
    keyed kind, spawned). Override ``on_start``/``on_stop`` to own background tasks.

    ``Agent(tools=...)`` (as upstream; a subclass calls ``super().__init__(tools=...)``):
    the agent owns these ``xrmq.actors.tools.Tool`` s, and ``AgentRuntime.register``
    serves them on the bus as tool server ``tool_server`` (default: the registered name),
    exactly as ``serve_tools`` does: callers reach them as ``SERVER__TOOL`` through
    ``remote_tool``/``ToolSet``. The tools package provides both (``set_tools_check``,
    ``add_register_hook``), so the kernel does not import it. A keyed kind's instances
    serve no tools (they are spawned after the runtime started).
    """

    name: str = ""
    runtime: AgentHost | None = None
    _tools: tuple[Any, ...] = ()
    _tool_server: str | None = None

    def __init__(self, *, tools: Sequence[Any] = (), tool_server: str | None = None) -> None:
        if tools:
            self._tools = _tools_check[0](tools, f"{type(self).__qualname__}.tools")
        self._tool_server = tool_server

    @property
    def tools(self) -> tuple[Any, ...]:
        """The tools this agent serves on the bus (``Agent(tools=...)``)."""
        return self._tools

    @property
    def tool_server(self) -> str | None:
        """The tool server name its tools are served as (None: its registered name)."""
        return self._tool_server

    def on_register(self) -> None:
        """Called by ``register`` once the agent is hosted (``name`` and ``runtime`` set),
        before the runtime starts. An agent that brings companion actors registers them
        here (the context manager's subscriber registers its local section actors and
        workers). Not called for a keyed kind's instances (spawned after the start)."""

    async def on_start(self) -> None:
        """Called once the runtime is ready (or the keyed instance is spawned)."""

    async def on_stop(self) -> None:
        """Called when the runtime stops, before its sockets close; cancel owned tasks here."""

    def handlers(self) -> Handlers:
        """The topics this actor handles, each mapped to its handler method (or methods).

        By default the ``@subscribe``-tagged methods of its class. An actor whose topics
        come from configuration (a renderer told its output topic, a context actor
        standing for one topic) overrides this and maps each topic to the method itself
        (``{topic: self.on_update}``); the runtime reads it at ``register``.
        """
        return subscriptions(type(self))

    async def on_gap(self, gap: Any, ctx: RuntimeContext) -> None:
        """Messages of a topic this actor handles were lost (``gap`` is a ``sequence.Gap``).

        Called in order with the actor's messages, before the message that revealed the
        gap (or when a sender's heartbeat revealed a lost tail). Only actors that override
        it are told; the default does nothing.
        """

    def gauges(self) -> dict[str, float]:
        """Numbers this actor reports in its runtime's metrics (``xrmq top``); summed over keyed
        instances."""
        return {}


class RuntimeContext(msgspec.Struct, eq=False):
    """What a handler knows about the message it is handling, and how it publishes.

    ``publish`` defaults the source to this agent's name and the participant to the
    current message's participant, and links correlation and parent ids, so everything
    published while handling one message can be traced back to it. One is built per
    handled message and a handler may keep it (in a task it starts, say), so it is
    never reused; it is a Struct only for msgspec's C constructor, which costs half a
    class's (the fields are not type-checked and it is never encoded).
    """

    runtime: AgentHost
    agent_name: str
    metadata: MessageMetadata
    topic: Topic

    @property
    def participant_id(self) -> str | None:
        return self.metadata.participant_id

    def _participant(self, participant_id: str | Scope | None) -> str | None:
        if participant_id is None:
            return self.metadata.participant_id
        return None if isinstance(participant_id, Scope) else participant_id

    async def publish(
        self,
        topic: Topic,
        message: Any,
        *,
        participant_id: str | Scope | None = None,
        source: str | None = None,
    ) -> None:
        """Publish ``message`` on ``topic`` as this agent, in reply to the current message.

        ``participant_id`` omitted or None keeps the current message's participant (as
        upstream); ``GLOBAL`` publishes to everyone; a string names another participant.
        ``message`` may be a mapping, converted into the topic's type (``Topic.validate``).
        """
        self.runtime.send(
            topic,
            message,
            participant_id=self._participant(participant_id),
            source=self.agent_name if source is None else source,
            correlation_id=self.metadata.correlation_id or self.metadata.message_id,
            parent_message_id=self.metadata.message_id,
            traceparent=self.metadata.traceparent,
        )

    async def ask(
        self,
        topic: Topic,
        message: Any,
        *,
        reply_type: Any = Any,
        participant_id: str | Scope | None = None,
        timeout: float = 5.0,
    ) -> Any:
        """Ask another actor, as this agent, within the current message's correlation.

        ``participant_id`` as for ``publish``: None keeps the current participant.
        """
        return await self.runtime.ask(
            topic,
            message,
            reply_type=reply_type,
            participant_id=self._participant(participant_id),
            source=self.agent_name,
            timeout=timeout,
            correlation_id=self.metadata.correlation_id or self.metadata.message_id,
        )
