"""AgentRuntime: hosts actors in one process and connects them to the bus.

One runtime owns one PUB socket (to the broker's XSUB) and one SUB socket (from the broker's
XPUB). Inbound messages are demultiplexed to actor mailboxes by topic (and participant, for
filtered actors and keyed kinds). Publishing never blocks on subscribers: the bus is asynchronous,
at-most-once per hop, and every loss is reported as a gap by the receiver. Without a bus address
it starts an embedded broker on ``inproc://`` in its own process (the development default).

``AgentRuntime`` is the public face, the lifecycle and the send path (``send``: the one
prologue of every message built from a topic; ``reply``). It composes objects with one job
each: the registry of actors, routes and keyed instances (``registry.py``), the receive path
(``receiver.py``), asks in flight (``asks.py``), outgoing streams and heartbeats
(``outgoing.py``), counters, faults and metrics (``observation.py``), and the sockets with the
readiness handshake (``connection.py``); it is the ``MailboxHost`` of its mailboxes. The
tables and bound methods the hot path uses are bound to this object once, at construction,
so composing them costs no attribute hop per message; the private APIs of the hot path are
in ``_compat.py``.

Hot path (``send``, ``ask``, ``Receiver.on_readable``, ``Receiver.dispatch``): benchmark before
and after a change here (``python -m bench bus turn storm``, see ``bench/README.md``).
"""

from __future__ import annotations

import asyncio
import itertools
import os
import time
import uuid
from collections.abc import Callable
from typing import Any, TypeVar

import msgspec
import zmq

from xrmq.actors.logs import get_logger
from xrmq.schemas import MessageMetadata, RuntimeMetrics
from xrmq.schemas._validation import is_name
from xrmq.topics import METRICS_TOPIC, SEP, Topic

from ._compat import frame_send
from .address import BusAddress, check_ipc_directories
from .agent import Agent, Handlers
from .asks import DEFERRED_REPLY, Asks
from .broker import DEFAULT_HWM, DEFAULT_MAX_MESSAGE_BYTES
from .connection import BusConnection, resolve_bus
from .edge_checks import DEFAULT_EPOCH_SKEW_S
from .exceptions import RuntimeClosedError
from .mailbox import Mailbox
from .observation import Observation
from .outgoing import DEFAULT_HEARTBEAT_S, DEFAULT_OUTGOING_STREAMS, OutgoingStreams
from .ratelimit import DEFAULT_INTERVAL_S
from .receiver import Receiver
from .registry import DEFAULT_KEYED_INSTANCES, Registry
from .scope import GLOBAL, Scope
from .sequence import DEFAULT_STREAM_CAPACITY, SequenceTracker
from .streams import ReplyStream

_AgentT = TypeVar("_AgentT", bound=Agent)

APPLICATION = "application"
# Plain ints, per-frame calls: pyzmq's multipart helpers convert flag enums per frame.
_SNDMORE = int(zmq.SNDMORE)
# pyzmq's Cython send without its Python wrapper, where available (see _compat).
_frame_send: Callable[..., Any] = frame_send

_metadata_encoder = msgspec.msgpack.Encoder()
_reply_encoder = msgspec.msgpack.Encoder()


class AgentRuntime:
    """Hosts actors and connects them to one bus.

    ``bus`` is a bus string (see ``xrmq.actors.runtime.address``) or a ``BusAddress``;
    None starts an embedded broker in this process. ``name`` identifies this runtime
    as a sender (stable across restarts of the same process role; the epoch changes).
    With ``metrics_interval`` (seconds) it publishes ``RuntimeMetrics`` on ``METRICS_TOPIC``
    that often: its heartbeat (the last seqs it lists, so a receiver counts a lost tail:
    ``outgoing.py``) and what ``xrmq top`` shows; without it, every ``heartbeat_s`` once it
    has published (None: never); when it stops, a final one with every stream's last seq,
    confirmed through the broker (``ready_timeout`` at most). An actor whose mailbox has not
    moved for ``stuck_after`` seconds is reported (``RuntimeMetrics.stuck``) and, with
    ``restart_stuck`` (default), restarted: the handler in flight is cancelled, the mailbox
    kept. A handler that blocks the event loop stops the whole runtime, heartbeat included,
    so the supervisor's liveness watch restarts the process.

    Limits (every table fed by the bus is bounded, what is dropped counted): ``max_message_bytes``
    (``ZMQ_MAXMSGSIZE`` of the SUB socket; a larger payload is refused on send), ``stream_capacity``
    (incoming streams tracked), ``outgoing_streams``, ``keyed_instances`` (per keyed kind),
    ``epoch_skew_s`` (the clock skew the epoch check allows) and ``warn_interval_s`` (a repeated
    warning is logged once per interval per kind, topic and sender, with a count).

    On a CURVE bus, ``key`` is this runtime's secret key file (``NAME.key_secret``) and
    ``server_key`` the broker's public key (its file or Z85 text); None takes them from
    ``$XRMQ_KEY`` and ``$XRMQ_SERVER_KEY`` if set. The runtime is then identity ``NAME``,
    and its default name is ``NAME-<random>`` (a runtime name belongs to its identity).
    """

    def __init__(
        self,
        bus: str | BusAddress | None = None,
        *,
        name: str | None = None,
        hwm: int = DEFAULT_HWM,
        mailbox_capacity: int = 10_000,
        ready_timeout: float = 10.0,
        metrics_interval: float | None = None,
        heartbeat_s: float | None = DEFAULT_HEARTBEAT_S,
        stuck_after: float = 10.0,
        restart_stuck: bool = True,
        max_message_bytes: int = DEFAULT_MAX_MESSAGE_BYTES,
        stream_capacity: int = DEFAULT_STREAM_CAPACITY,
        outgoing_streams: int = DEFAULT_OUTGOING_STREAMS,
        keyed_instances: int = DEFAULT_KEYED_INSTANCES,
        epoch_skew_s: float = DEFAULT_EPOCH_SKEW_S,
        warn_interval_s: float = DEFAULT_INTERVAL_S,
        key: str | os.PathLike[str] | None = None,
        server_key: str | os.PathLike[str] | bytes | None = None,
    ) -> None:
        if name is not None and not is_name(name, blank=False):
            raise ValueError("name: must be a non-empty string without NUL, not only whitespace")
        self.address, self.credentials = resolve_bus(bus, key, server_key)
        prefix = self.credentials.identity if self.credentials is not None else "rt"
        self.name = name or f"{prefix}-{uuid.uuid4().hex[:10]}"
        self.hwm = hwm
        self.mailbox_capacity = mailbox_capacity
        self.ready_timeout = ready_timeout
        self.metrics_interval = metrics_interval
        self.heartbeat_s = heartbeat_s
        self.restart_stuck = restart_stuck
        self.max_message_bytes = max_message_bytes
        self.outgoing_streams = outgoing_streams
        self.max_keyed_instances = keyed_instances
        self._running = False
        self.stopping = False
        """Whether ``stop()`` began: an actor's ``on_stop`` is then not its retirement."""
        self.epoch = 0
        self._id_prefix = ""
        self._ids = itertools.count(1)
        self._inbox = f"_inbox.{self.name}"
        self._inbox_bytes = self._inbox.encode()
        self._pub: zmq.Socket | None = None
        self._metrics_task: asyncio.Task[None] | None = None
        self._asks = asks = Asks(self.send, self._inbox)
        self._pending = asks.pending
        self._send_ask = asks.send
        self._take_reply = asks.take
        self._log = get_logger(runtime=self.name)
        self._observation = observation = Observation(
            self.name, self._log, stuck_after=stuck_after, warn_interval_s=warn_interval_s
        )
        self._counters = observation.counters
        self._registry = registry = Registry(
            self, self, mailbox_capacity, keyed_instances, observation.count_eviction
        )
        # The registry's tables, bound once (start() subscribes and starts from them).
        self._agents = registry.agents
        self._routes = registry.routes
        self._private_routes = registry.private_routes
        self._subscriptions = registry.subscriptions
        self._outgoing = outgoing = OutgoingStreams(
            outgoing_streams,
            observation.count_eviction,
            lambda seqs, final: self.send(
                METRICS_TOPIC, self.metrics(seqs, final), source="runtime"
            ),
            observation.warnings,
            self._log,
            metrics_interval=metrics_interval,
            heartbeat_s=heartbeat_s,
        )
        self._streams = outgoing.table
        self._open_stream = outgoing.open
        self._tracker = SequenceTracker(stream_capacity)
        self._connection = BusConnection(
            self.address,
            self.credentials,
            embedded=bus is None,
            hwm=hwm,
            max_message_bytes=max_message_bytes,
            ready_timeout=ready_timeout,
        )
        self._receiver = receiver = Receiver(
            self.name,
            self._inbox_bytes,
            registry,
            self._pending,
            self._connection.readiness,
            self._tracker,
            observation,
            epoch_skew_s=epoch_skew_s,
            curve=self.credentials is not None,
        )
        self._dispatch = receiver.dispatch
        self.gaps = receiver.gaps
        """The most recent gaps (the ``gaps`` counter counts all of them)."""

    # ------------------------------------------------------------------ lifecycle

    @property
    def running(self) -> bool:
        return self._running

    async def __aenter__(self) -> AgentRuntime:
        await self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.stop()

    async def start(self) -> None:
        """Connect, wait until every subscription is live through the broker, start actors."""
        if self._running:
            return
        if self.stopping:
            raise RuntimeClosedError("start: this runtime was stopped; create a new one")
        check_ipc_directories(self.address)
        self._subscriptions.add(self._inbox_bytes + SEP)
        receiver = self._receiver
        self._pub, sub = self._connection.open(self._subscriptions)
        self.epoch = time.time_ns() // 1000
        self._id_prefix = f"{self.name}:{self.epoch:x}:"
        # The loop, once: on 3.11 every get_running_loop() makes a getpid() system call.
        loop = asyncio.get_running_loop()
        self._asks.start(loop)
        receiver.attach(sub, loop)
        try:
            await self._connection.wait_ready(self._subscriptions)
        except BaseException:
            await self.stop()
            raise
        receiver.live(tuple(self._subscriptions))
        self._running = True  # ``running`` means ready: every subscription is live
        for mailbox in self._agents.values():
            await self.guarded_hook(mailbox.agent, "on_start", mailbox)
        for mailbox in self._agents.values():
            mailbox.start(call_on_start=False)
        self._metrics_task = self._outgoing.start(self.name)
        self._log.info(
            "runtime.ready",
            bus=self.address.subscribe,
            actors=sorted(self._agents),
            keyed=sorted(self._registry.keyed),
        )

    async def stop(self) -> None:
        """Stop in order: actors (``on_stop``), intake and pending asks, mailboxes, sockets.

        ``on_stop`` runs while the runtime still publishes, reads and heartbeats, so an
        actor can finish or finalize what it owns (an open reply stream gets its
        terminator) and still receive what that takes (an ask's reply, a remote call's
        end): no actor waits on a message that can no longer arrive. Actors stop in the
        reverse order of registration, so one may rely on an actor registered before it
        while it stops (a router on its remote proxies); an actor whose ``on_stop`` has
        run gets no further message, and no keyed instance is spawned meanwhile. Then
        intake stops, pending asks fail, and in-flight handlers are cancelled.
        """
        if self.stopping:
            return
        self.stopping = self._registry.closed = True
        receiver = self._receiver
        mailboxes = self._registry.all_mailboxes()
        if self._running:
            for mailbox in reversed(mailboxes):
                await self.guarded_hook(mailbox.agent, "on_stop", mailbox)
                receiver.finished.add(mailbox.name)
        if self._metrics_task is not None:
            self._metrics_task.cancel()
            await asyncio.gather(self._metrics_task, return_exceptions=True)
        self._asks.close()
        announced = self._running and bool(self._streams)
        if self._running:
            self._outgoing.final()  # nothing publishes after it: ``running`` ends with it
        self._running = False
        for mailbox in mailboxes:
            await mailbox.stop()
        if self._registry.retiring:
            await asyncio.gather(*self._registry.retiring, return_exceptions=True)
        if announced:  # the final heartbeat passed the broker before the socket closes
            await self._connection.flush(self._inbox_bytes + SEP, self.ready_timeout, self._log)
        receiver.detach()
        self._observation.warnings.flush_all()
        await self._connection.close()
        self._log.info("runtime.stopped", **{k: v for k, v in self._counters.items() if v})

    # ------------------------------------------------------------------ publishing

    async def publish(
        self,
        topic: Topic,
        message: Any,
        *,
        participant_id: str | Scope | None = None,
        source: str = APPLICATION,
    ) -> None:
        """Publish ``message`` on ``topic`` for ``participant_id`` (None or ``GLOBAL``: global).

        ``message`` is the topic's type or a mapping converted into it (``Topic.validate``).
        Returns once the message is handed to the bus; delivery is asynchronous.
        """
        if participant_id is GLOBAL:
            participant_id = None
        self.send(topic, message, participant_id=participant_id, source=source)

    def send(
        self,
        topic: Topic,
        message: Any,
        *,
        participant_id: str | None = None,
        source: str = APPLICATION,
        correlation_id: str | None = None,
        parent_message_id: str | None = None,
        reply_to: str | None = None,
        traceparent: str | None = None,
    ) -> str:
        """Publish synchronously (never blocks); returns the message id.

        ``publish`` without the coroutine: the call for code that publishes in a loop. The
        one prologue of every message built from a topic (``ask`` sends its request here).
        """
        if not self._running:
            what = "publish" if reply_to is None else "ask"
            raise RuntimeClosedError(f"{what}: runtime {self.name!r} is not running")
        if not source or source.isspace():
            raise ValueError(f"source: must be a non-empty name, not {source!r}")
        stream = self._streams.get((topic.name, participant_id)) or self._open_stream(
            topic.name, participant_id
        )
        payload = topic.encode(message)
        if len(payload) > self.max_message_bytes:
            self._counters["oversize"] += 1
            raise ValueError(
                f"payload: {len(payload)} bytes on {topic.name!r} exceed max_message_bytes "
                f"({self.max_message_bytes}); receivers would drop the connection"
            )
        return self._send_frames(
            stream,
            payload,
            participant_id,
            source,
            correlation_id,
            parent_message_id,
            reply_to,
            traceparent,
        )

    def _send_frames(
        self,
        stream: list[Any],
        payload: bytes,
        participant_id: str | None,
        source: str,
        correlation_id: str | None,
        parent_message_id: str | None,
        reply_to: str | None,
        traceparent: str | None,
        error: str | None = None,
    ) -> str:
        # One dict lookup for the key and its sequence, validated once per stream, and
        # %-formatting for the id.
        stream[1] = seq = stream[1] + 1
        message_id = "%s%x" % (self._id_prefix, next(self._ids))  # noqa: UP031  (hot path)
        # Positional: the field order of MessageMetadata (cheaper than keywords).
        metadata = MessageMetadata(
            message_id,
            source,
            self.name,
            self.epoch,
            seq,
            time.time_ns() // 1000,
            correlation_id or message_id,
            parent_message_id,
            participant_id,
            reply_to,
            error,
            traceparent,
        )
        pub = self._pub
        _frame_send(pub, stream[0], _SNDMORE)
        _frame_send(pub, _metadata_encoder.encode(metadata), _SNDMORE)
        _frame_send(pub, payload)
        self._counters["published"] += 1
        return message_id

    async def ask(
        self,
        topic: Topic,
        message: Any,
        *,
        reply_type: Any = Any,
        participant_id: str | Scope | None = None,
        source: str = APPLICATION,
        timeout: float = 5.0,
        correlation_id: str | None = None,
    ) -> Any:
        """Send ``message`` to the actor(s) handling ``topic`` and await the first reply.

        The handler's return value is the reply, decoded as ``reply_type``. Raises
        ``TimeoutError`` after ``timeout`` seconds, ``AskError`` if the handler failed,
        ``RuntimeClosedError`` if the runtime stops first.
        """
        message_id, future = self._send_ask(
            topic, message, participant_id, source, timeout, correlation_id
        )
        return await self._take_reply(message_id, future, reply_type)

    def request(
        self,
        topic: Topic,
        message: Any,
        *,
        reply_type: Any = Any,
        participant_id: str | Scope | None = None,
        source: str = APPLICATION,
        timeout: float = 5.0,
        correlation_id: str | None = None,
    ) -> asyncio.Task[Any]:
        """``ask``, with the request sent before this returns: a task of its reply.

        For a caller that goes on before awaiting the reply, or shields it from its own
        cancellation: a task wrapping ``ask()`` sends the request only when it first runs,
        an event-loop pass later, on the asker's critical path. Raises at once what
        ``ask`` raises before sending.
        """
        message_id, future = self._send_ask(
            topic, message, participant_id, source, timeout, correlation_id
        )
        return asyncio.ensure_future(self._take_reply(message_id, future, reply_type))

    def ask_stream(
        self,
        topic: Topic,
        message: Any,
        *,
        reply_type: Any = Any,
        participant_id: str | Scope | None = None,
        source: str = APPLICATION,
        timeout: float = 5.0,
        max_buffered: int = 1024,
    ) -> ReplyStream[Any]:
        """``ask``, keeping every reply: a ``ReplyStream`` of the replies as they arrive
        (a handler answering in parts calls ``reply`` for each). ``timeout`` bounds the
        whole stream; the caller closes it when the replier's protocol says it is done."""
        return self._asks.stream(
            topic, message, reply_type, participant_id, source, timeout, max_buffered
        )

    def reply(self, request: MessageMetadata, result: Any, *, error: str | None = None) -> None:
        """Send a handler's result (or failure) to the asker's inbox.

        Nothing for ``DEFERRED_REPLY``: that handler replies later itself. Raises only
        for a request no edge check let through (say, an empty participant); the mailbox
        counts that as a fault of the actor.
        """
        if not self._running or request.reply_to is None or result is DEFERRED_REPLY:
            return
        try:
            payload = _reply_encoder.encode(result)
        except TypeError as encode_error:
            payload, error = _reply_encoder.encode(None), f"reply not encodable: {encode_error}"
        if len(payload) > self.max_message_bytes:
            self._counters["oversize"] += 1
            error = f"reply of {len(payload)} bytes exceeds max_message_bytes"
            payload = _reply_encoder.encode(None)
        stream = self._streams.get((request.reply_to, request.participant_id)) or self._open_stream(
            request.reply_to, request.participant_id
        )
        self._send_frames(
            stream,
            payload,
            request.participant_id,
            request.source,
            request.message_id,
            request.message_id,
            None,
            request.traceparent,
            error,
        )

    # ------------------------------------------------------------------ registry

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
        everyone, concerns every participant). The register hooks may register companion
        actors beside it (``Agent(tools=...)``: its tool server).
        """
        return self._registry.register(
            name, agent, participant_id=participant_id, mailbox_capacity=mailbox_capacity
        )

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
        self._registry.register_keyed(
            kind,
            agent_type,
            factory=factory,
            shard=shard,
            shards=shards,
            mailbox_capacity=mailbox_capacity,
            handlers=handlers,
            max_instances=max_instances,
        )

    def agent(self, name: str) -> Agent:
        """The agent registered under ``name``; ``KeyError`` if there is none."""
        return self._agents[name].agent

    def keyed_instances(self, kind: str) -> dict[str, Agent]:
        """The live instances of a keyed kind in this runtime, by key."""
        return {k: mailbox.agent for k, mailbox in self._registry.keyed[kind].instances.items()}

    def spawn(self, kind: str, key: str) -> Agent:
        """The live instance of keyed ``kind`` for ``key``, spawned now as a first message
        would spawn it (e.g. to restore state at start). Only while running;
        ``ValueError`` if this runtime's shard does not own ``key``."""
        return self._registry.spawn(kind, key)

    async def retire(self, kind: str, key: str, *, idle_only: bool = False) -> bool:
        """Stop and forget ``kind``'s instance for ``key`` (``idle_only``: if idle); True if so."""
        return await self._registry.retire(kind, key, idle_only=idle_only)

    # ------------------------------------------------------------------ observation

    def metrics(
        self, last_seq: dict[str, int] | None = None, final: bool = False
    ) -> RuntimeMetrics:
        """This runtime's counters, mailbox depths, faults, table sizes and actor gauges, now."""
        return self._observation.metrics(
            self._registry,
            self._tracker,
            outgoing_streams=len(self._streams),
            asks_in_flight=len(self._pending),
            epoch=self.epoch,
            restart=self.restart_stuck and self._running,
            identity=self.credentials.identity if self.credentials is not None else None,
            last_seq=last_seq,
            final=final,
        )

    # ------------------------------------------------------------------ mailbox host

    async def guarded_hook(self, agent: Agent, hook: str, mailbox: Mailbox | None = None) -> None:
        """Run ``agent.on_start``/``on_stop``; a failure is logged and counted, never raised."""
        await self._observation.guarded_hook(agent, hook, mailbox)

    def handler_failed(
        self, actor: str, topic: Topic, metadata: MessageMetadata, error: BaseException | str
    ) -> None:
        """Count and log a handler's failure (aggregated per actor, topic and sender) and
        answer an ask with the error."""
        self._observation.handler_failed(self.reply, actor, topic, metadata, error)

    def actor_fault(
        self,
        actor: str,
        step: str,
        topic: Topic,
        metadata: MessageMetadata,
        error: BaseException | str,
    ) -> None:
        """Count a fault in an actor's path (``step``: handler, reply, dispatch...) and log it,
        once per actor, topic and sender per interval; the actor goes on with its next message.
        The mailbox counts it for the actor itself (``RuntimeMetrics.actor_faults``)."""
        self._observation.actor_fault(actor, step, topic, metadata, error)

    def mailbox_restarted(self, actor: str, error: BaseException | None) -> None:
        """A mailbox task ended although it never should: the mailbox started a new one."""
        self._observation.mailbox_restarted(actor, error)

    def coalesced(self) -> None:
        """Count a superseding update replaced while queued (``RuntimeMetrics.coalesced``)."""
        self._counters["coalesced"] += 1
