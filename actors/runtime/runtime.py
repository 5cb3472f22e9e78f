"""AgentRuntime: hosts actors in one process and connects them to the bus.

Hot path (``send``, ``ask``, ``_on_readable``, ``_dispatch``): benchmark before and after a
change here (``python -m bench bus turn storm``, see ``bench/README.md``).

One runtime owns one PUB socket (to the broker's XSUB) and one SUB socket (from the
broker's XPUB). Inbound messages are demultiplexed to actor mailboxes by topic (and
participant, for filtered actors and keyed kinds). Publishing never blocks on
subscribers: the bus is asynchronous, at-most-once per hop, and every loss is
reported as a gap by the receiver.

Without a bus address the runtime starts an embedded broker on ``inproc://``
endpoints in its own process (the development default).

Apart from this module: registration and keyed instances (``registration.py``), the
routing table's entries (``routes.py``), the readiness handshake of ``start()``
(``readiness.py``), the metrics snapshot and heartbeat loop (``metrics.py``), the counter
names (``RuntimeCounters`` in ``xrmq.schemas.metrics``) and the private APIs of the send
path (``_compat.py``).
"""

from __future__ import annotations

import asyncio
import itertools
import os
import time
import uuid
from collections import deque
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, TypeVar, cast

import msgspec
import zmq

from xrmq.schemas import MessageMetadata, RuntimeMetrics
from xrmq.schemas._validation import check_positive, is_name
from xrmq.schemas.metrics import RUNTIME_COUNTERS
from xrmq.topics import METRICS_TOPIC, SEP, Topic, topic_key

from ._compat import INLINE_START, frame_send
from .address import BusAddress, check_ipc_directories, parse_bus
from .agent import GLOBAL, Agent, Scope
from .broker import DEFAULT_HWM, DEFAULT_MAX_MESSAGE_BYTES, Broker, shared_context
from .deadlines import AskDeadlines
from .edge_checks import DEFAULT_EPOCH_SKEW_S, EnvelopeCheck, metadata_category
from .logs import get_logger
from .mailbox import Mailbox
from .metrics import Observation
from .progress import ProgressWatch
from .ratelimit import DEFAULT_INTERVAL_S, AggregatedWarnings
from .readiness import Readiness
from .registration import Registration
from .routes import KeyedKind, Route
from .security.keys import ClientCredentials, client_credentials
from .sequence import DEFAULT_STREAM_CAPACITY, STALE, Gap, SequenceTracker
from .streams import ReplyStream
from .tables import evict_over

if TYPE_CHECKING:
    pass

_AgentT = TypeVar("_AgentT", bound=Agent)

APPLICATION = "application"
_DRAIN_BATCH = 512
# pyzmq's multipart helpers convert flag enums per frame; plain ints with per-frame
# calls cost a third as much (measured: send 2.9 -> 1.0 us, receive 2.6 -> 1.8 us).
_SNDMORE = int(zmq.SNDMORE)
_NOBLOCK = int(zmq.NOBLOCK)
# pyzmq's Cython send without its Python wrapper, where available (see _compat).
_frame_send: Callable[..., Any] = frame_send
_EVENTS = int(zmq.EVENTS)
_POLLIN = int(zmq.POLLIN)

_metadata_encoder = msgspec.msgpack.Encoder()
_metadata_decoder = msgspec.msgpack.Decoder(MessageMetadata)
_reply_encoder = msgspec.msgpack.Encoder()
_heartbeat_decoder = msgspec.msgpack.Decoder(RuntimeMetrics)
_DECODE_ERRORS = (msgspec.DecodeError, msgspec.ValidationError, RecursionError)
"""What decoding an untrusted frame can raise (deeply nested MessagePack: RecursionError)."""
_METRICS_NAME = METRICS_TOPIC.name.encode()

DEFAULT_OUTGOING_STREAMS = 4096
"""Outgoing streams (topic x participant, inbox x participant) one runtime numbers; CLOCK
eviction beyond (a retired stream that sends again restarts at seq 1)."""
DEFAULT_KEYED_INSTANCES = 4096
"""Live instances of one keyed kind in one runtime; the least recently used idle one is
retired (``on_stop``) beyond."""
HEARTBEAT_KEYS = 256
"""Streams a heartbeat lists beyond those that changed since the last one: all of them when
there are this few, else the next slice in turn, so every stream's last seq is announced again
and again (a receiver that lost the heartbeats of an overload still learns of the lost tail)."""
DEFAULT_HEARTBEAT_S = 2.0
"""Without ``metrics_interval``, how often a runtime that has published announces the last seq
of its streams (a short heartbeat), so a receiver counts a lost tail within this long."""
# An outgoing stream: [wire key, last seq, seq at the last eviction look, seq at the last
# heartbeat].
_KEY, _SEQ, _SEEN, _BEAT = range(4)


class _DeferredReply:
    __slots__ = ()

    def __repr__(self) -> str:
        return "DEFERRED_REPLY"


DEFERRED_REPLY: Any = _DeferredReply()
"""What a handler returns to answer an ask later: it keeps ``ctx.metadata`` and calls
``runtime.reply(metadata, result)`` itself (a tool server runs each call as a task, so
one slow call does not hold up the next)."""


class RuntimeClosedError(RuntimeError):
    """The runtime is not running (not started yet, or stopped)."""


class AskError(RuntimeError):
    """The actor that was asked failed while handling the request."""


class AgentRuntime(Registration, Observation):
    """Hosts actors and connects them to one bus.

    ``bus`` is a bus string (see ``xrmq.actors.runtime.address``) or a ``BusAddress``;
    None starts an embedded broker in this process. ``name`` identifies this runtime
    as a sender (stable across restarts of the same process role; the epoch changes).
    With ``metrics_interval`` (seconds) it publishes ``RuntimeMetrics`` on
    ``METRICS_TOPIC`` that often: its heartbeat and what ``xrmq top`` shows. The
    heartbeat lists the last seq this runtime sent on each key that sent since the last
    one (and the others in turn, ``HEARTBEAT_KEYS``), so a receiver reports a lost tail of
    a stream within one interval. Without it, a runtime that has published heartbeats every
    ``heartbeat_s`` (default ``DEFAULT_HEARTBEAT_S``; None: never), so a long-lived
    publisher's lost tail is counted too; and every runtime that has published sends a final
    heartbeat when it stops, listing the last seq of every stream it numbered (its tail
    announced before it goes). An actor whose mailbox is non-empty and has not moved
    for ``stuck_after`` seconds is reported in ``RuntimeMetrics.stuck`` and logged once
    (``actor.stuck``); with ``restart_stuck`` (default) it is restarted then: the
    handler in flight is cancelled (a fault of its message; an ask gets the error), the
    mailbox and its queue are kept, and the actor takes its next message; counted in
    ``RuntimeMetrics.stuck_restarts`` and logged (``actor.stuck_restarted``). A handler
    that swallows the cancellation stays stuck (and reported); one that blocks the event
    loop (a C call that never returns) stops the whole runtime, heartbeat included, so
    the supervisor's liveness watch kills and restarts the process.

    Limits (every table fed by the bus is bounded, and what is dropped is counted):
    ``max_message_bytes`` (``ZMQ_MAXMSGSIZE`` of the SUB socket; a larger payload is
    refused on send), ``stream_capacity`` (incoming streams tracked),
    ``outgoing_streams``, ``keyed_instances`` (per keyed kind), ``epoch_skew_s`` (the
    clock skew the epoch check allows) and ``warn_interval_s`` (a repeated warning is
    logged once per interval per kind, topic and sender, with a count).

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
        limits = (
            ("mailbox_capacity", mailbox_capacity),
            ("max_message_bytes", max_message_bytes),
            ("outgoing_streams", outgoing_streams),
            ("keyed_instances", keyed_instances),
        )
        for field, value in limits:
            check_positive(value, field)
        for field, interval in (
            ("metrics_interval", metrics_interval),
            ("heartbeat_s", heartbeat_s),
        ):
            if interval is not None and not interval > 0:
                raise ValueError(
                    f"{field}: must be a positive number of seconds or None, got {interval!r}"
                )
        if name is not None and not is_name(name, blank=False):
            raise ValueError("name: must be a non-empty string without NUL, not only whitespace")
        self._embedded = bus is None
        if bus is None:
            self.address = parse_bus(f"inproc://xrmq-embedded-{uuid.uuid4().hex}")
        else:
            self.address = bus if isinstance(bus, BusAddress) else parse_bus(bus)
        self.credentials: ClientCredentials | None = (
            None if bus is None else client_credentials(key, server_key)
        )
        if bus is None and (key is not None or server_key is not None):
            raise ValueError("key: an embedded bus has no broker to authenticate to")
        prefix = self.credentials.identity if self.credentials is not None else "rt"
        self.name = name or f"{prefix}-{uuid.uuid4().hex[:10]}"
        self.hwm = hwm
        self.mailbox_capacity = mailbox_capacity
        self.ready_timeout = ready_timeout
        self.metrics_interval = metrics_interval
        self.heartbeat_s = heartbeat_s
        self._metrics_task: asyncio.Task[None] | None = None
        self._progress = ProgressWatch(stuck_after)
        self.restart_stuck = restart_stuck
        self._finished: set[str] = set()
        """Actors whose ``on_stop`` has run while the runtime stops: nothing more reaches them."""
        self.gaps: deque[Gap] = deque(maxlen=1000)
        """The most recent gaps (the ``gaps`` counter counts all of them)."""
        self._log = get_logger(runtime=self.name)
        self._warnings = AggregatedWarnings(self._log, interval_s=warn_interval_s)
        self.max_message_bytes = max_message_bytes
        self.outgoing_streams = outgoing_streams
        self.max_keyed_instances = keyed_instances
        self._check = EnvelopeCheck(epoch_skew_s)
        self._retiring: set[asyncio.Task[None]] = set()
        self._beat_cursor = 0
        self._agents: dict[str, Mailbox] = {}
        self._keyed: dict[str, KeyedKind] = {}
        self._routes: dict[bytes, list[Route]] = {}
        """Routes by topic name, where every delivery may share one decoded message."""
        self._private_routes: dict[bytes, list[Route]] = {}
        """Routes of topics whose type is not deeply immutable and that reach more than one
        delivery here: each delivery gets its own decode (``_dispatch_private``)."""
        self._subscriptions: set[bytes] = set()
        self._broker: Broker | None = None
        self._pub: zmq.Socket | None = None
        self._sub: zmq.Socket | None = None
        self._reader_fd: int | None = None
        self._drain_handle: asyncio.Handle | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._pending: dict[str, asyncio.Future[tuple[zmq.Frame, MessageMetadata]]] = {}
        self._deadlines: AskDeadlines | None = None
        self._reply_decoders: dict[Any, msgspec.msgpack.Decoder] = {}
        self._readiness = Readiness()
        self._tracker = SequenceTracker(stream_capacity)
        self._live_since_us: int | None = None
        """When every subscription of ``start`` was live through the broker (µs, wall clock)."""
        self._live_prefixes: tuple[bytes, ...] = ()
        """Those subscriptions: a stream on one of them from a sender whose epoch is later was
        bound for this runtime from its first message (``_on_heartbeat``)."""
        self._streams: dict[tuple[str, str | None], list[Any]] = {}
        """Outgoing streams by (topic name, participant): [wire key, last seq sent, ...]."""
        self._ids = itertools.count(1)
        self._running = False
        self._closed = False
        self.epoch = 0
        self._id_prefix = ""
        self._inbox = f"_inbox.{self.name}"
        self._inbox_bytes = self._inbox.encode()
        self._counters = dict.fromkeys(RUNTIME_COUNTERS, 0)
        self._rejected_by: dict[str, int] = {}
        self._evicted_by: dict[str, int] = {}

    # ------------------------------------------------------------------ lifecycle
    # (registration: registration.py)

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
        if self._closed:
            raise RuntimeClosedError("start: this runtime was stopped; create a new one")
        check_ipc_directories(self.address)
        if self._embedded:
            self._broker = Broker(
                self.address, hwm=self.hwm, max_message_bytes=self.max_message_bytes
            ).start()
        context = shared_context()
        self._pub = context.socket(zmq.PUB)
        self._pub.setsockopt(zmq.SNDHWM, self.hwm)
        self._pub.setsockopt(zmq.LINGER, 2000)
        self._sub = context.socket(zmq.SUB)
        self._sub.setsockopt(zmq.RCVHWM, self.hwm)
        self._sub.setsockopt(zmq.LINGER, 0)
        self._sub.setsockopt(zmq.MAXMSGSIZE, self.max_message_bytes)
        if self.credentials is not None:
            self.credentials.apply(self._pub)
            self.credentials.apply(self._sub)
        self._pub.connect(self.address.publish)
        self._sub.connect(self.address.subscribe)
        self._subscriptions.add(self._inbox_bytes + SEP)
        for prefix in sorted(self._subscriptions):
            self._sub.setsockopt(zmq.SUBSCRIBE, prefix)
        heartbeats = METRICS_TOPIC.subscription()
        if heartbeats not in self._subscriptions and self.credentials is None:
            # Heartbeats reveal the lost tails of streams. Not a readiness condition, and
            # not asked for on a CURVE bus, where reading them is a permission of its own
            # (they name every stream's key): there an identity detects lost tails only if
            # one of its actors subscribes to xrmq.metrics.
            self._sub.setsockopt(zmq.SUBSCRIBE, heartbeats)
        self.epoch = time.time_ns() // 1000
        self._id_prefix = f"{self.name}:{self.epoch:x}:"
        # The loop, once: on Python 3.11 every asyncio.get_running_loop() makes a getpid()
        # system call (a fork check), twice per ask on the round trip.
        self._loop = loop = asyncio.get_running_loop()
        self._deadlines = AskDeadlines(loop)
        fd = self._sub.getsockopt(zmq.FD)
        assert isinstance(fd, int)  # ZeroMQ's descriptor
        self._reader_fd = fd
        loop.add_reader(fd, self._on_readable)
        # what arrived before the registration
        self._drain_handle = loop.call_soon(self._on_readable)
        try:
            await self._await_ready()
        except BaseException:
            await self.stop()
            raise
        self._live_since_us = time.time_ns() // 1000
        self._live_prefixes = tuple(self._subscriptions)
        self._running = (
            True  # ``running`` means ready: every subscription is live through the broker
        )
        for mailbox in self._agents.values():
            await self.guarded_hook(mailbox.agent, "on_start", mailbox)
        for mailbox in self._agents.values():
            mailbox.start(call_on_start=False)
        if self.metrics_interval:
            self._metrics_task = asyncio.create_task(
                self._publish_metrics(), name=f"xrmq-metrics-{self.name}"
            )
        elif self.heartbeat_s:
            self._metrics_task = asyncio.create_task(
                self._publish_heartbeats(self.heartbeat_s), name=f"xrmq-heartbeat-{self.name}"
            )
        self._log.info(
            "runtime.ready",
            bus=self.address.subscribe,
            actors=sorted(self._agents),
            keyed=sorted(self._keyed),
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
        if self._closed:
            return
        self._closed = True
        mailboxes = self._all_mailboxes()
        if self._running:
            for mailbox in reversed(mailboxes):
                await self.guarded_hook(mailbox.agent, "on_stop", mailbox)
                self._finished.add(mailbox.name)
        if self._reader_fd is not None:
            asyncio.get_running_loop().remove_reader(self._reader_fd)
            self._reader_fd = None
        if self._drain_handle is not None:
            self._drain_handle.cancel()
        if self._metrics_task is not None:
            self._metrics_task.cancel()
            try:
                await self._metrics_task
            except asyncio.CancelledError:
                pass
        for future in self._pending.values():
            if not future.done():
                future.set_exception(RuntimeClosedError("ask: the runtime stopped"))
        self._pending.clear()
        if self._deadlines is not None:
            self._deadlines.close()
        if self._running:
            self._final_heartbeat()  # nothing publishes after it: ``running`` ends with it
        self._running = False
        for mailbox in mailboxes:
            await mailbox.stop()
        if self._retiring:
            await asyncio.gather(*self._retiring, return_exceptions=True)
        self._warnings.flush_all()
        if self._sub is not None:
            self._sub.close()
        if self._pub is not None:
            self._pub.close()
        if self._broker is not None:
            await asyncio.to_thread(self._broker.stop)
        self._log.info("runtime.stopped", **{k: v for k, v in self._counters.items() if v})

    async def guarded_hook(self, agent: Agent, hook: str, mailbox: Mailbox | None = None) -> None:
        """Run ``agent.on_start``/``on_stop``; a failure is logged and counted (a fault of
        ``mailbox``'s actor), never propagated."""
        try:
            await getattr(agent, hook)()
        except Exception as error:
            self._counters["handler_errors"] += 1
            self._counters["faults"] += 1
            if mailbox is not None:
                mailbox.faults += 1
            self._log.error(f"actor.{hook}_failed", actor=agent.name, error=repr(error))

    async def _await_ready(self) -> None:
        """Probe each subscription until its probe comes back through the broker
        (``readiness.py``)."""
        pub = self._pub
        assert pub is not None  # connected by start()
        self._readiness.arm(self._subscriptions)
        await self._readiness.wait(
            lambda key: pub.send_multipart((key, b"", b"")), self.ready_timeout, self._not_ready
        )

    def _not_ready(self) -> str:
        """Why ``start`` gives up; on a CURVE bus, naming the subscriptions still unanswered."""
        where = f"bus: no broker answered at {self.address.subscribe}"
        message = f"{where} within {self.ready_timeout}s"
        if self.credentials is None:
            return message
        pending = self._readiness.pending()
        participants = self._readiness.pending_participants()
        listening = f" as participant {', '.join(map(repr, participants))}" if participants else ""
        return (
            f"{message} (CURVE identity {self.credentials.identity!r}: is its key admitted, "
            f"and may it subscribe to {', '.join(pending)}{listening}?)"
        )

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
    ) -> str:
        """Publish synchronously (never blocks); returns the message id.

        ``publish`` without the coroutine: the call for code that publishes in a loop.
        """
        if not self._running:
            raise RuntimeClosedError(f"publish: runtime {self.name!r} is not running")
        if not source or source.isspace():
            raise ValueError(f"source: must be a non-empty name, not {source!r}")
        stream = self._streams.get((topic.name, participant_id)) or self._open_stream(
            topic.name, participant_id
        )
        payload = topic.encode(message)
        if len(payload) > self.max_message_bytes:
            self._refuse_oversize(topic.name, len(payload))
        return self._send_frames(
            stream,
            payload,
            participant_id,
            source,
            correlation_id,
            parent_message_id,
            reply_to,
            None,
        )

    def _refuse_oversize(self, name: str, size: int) -> None:
        self._counters["oversize"] += 1
        raise ValueError(
            f"payload: {size} bytes on {name!r} exceed max_message_bytes "
            f"({self.max_message_bytes}); receivers would drop the connection"
        )

    def _open_stream(self, name: str, participant_id: str | None) -> list[Any]:
        """The sequence of messages this runtime sends under one wire key, numbered from 1.

        The table is bounded (``outgoing_streams``, CLOCK eviction): a retired stream
        that sends again starts at 1, which receivers take as a fresh start.
        """
        if participant_id is GLOBAL:
            raise ValueError("participant_id: send() takes None for a global message, not GLOBAL")
        if participant_id is not None and not is_name(participant_id, blank=False):
            raise ValueError(
                f"participant_id: must be None or a non-empty string without NUL, "
                f"not only whitespace; got {participant_id!r}"
            )
        stream = self._streams[name, participant_id] = [topic_key(name, participant_id), 0, 0, 0]
        if len(self._streams) > self.outgoing_streams:
            evicted = evict_over(self._streams, self.outgoing_streams, _SEQ, _SEEN)
            self._count_eviction("outgoing_streams", evicted)
        return stream

    def _send_frames(
        self,
        stream: list[Any],
        payload: bytes,
        participant_id: str | None,
        source: str,
        correlation_id: str | None,
        parent_message_id: str | None,
        reply_to: str | None,
        error: str | None,
    ) -> str:
        # One dict lookup for the key and its sequence, validated once per stream, and
        # %-formatting for the id: measured 1.20 -> 1.0 us per send.
        stream[1] = seq = stream[1] + 1
        message_id = "%s%x" % (self._id_prefix, next(self._ids))  # noqa: UP031  (hot path)
        # Positional: the field order of MessageMetadata (measured 90 -> 64 ns).
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

    def _send_ask(
        self,
        topic: Topic,
        message: Any,
        participant_id: str | Scope | None,
        source: str,
        timeout: float,
        correlation_id: str | None,
    ) -> tuple[str, asyncio.Future[tuple[zmq.Frame, MessageMetadata]]]:
        """Send an ask's request now: its message id and the future its reply resolves."""
        if not self._running:  # still True while actors stop: an on_stop may ask
            raise RuntimeClosedError(f"ask: runtime {self.name!r} is not running")
        if not source or source.isspace():
            raise ValueError(f"source: must be a non-empty name, not {source!r}")
        if participant_id is GLOBAL:
            participant_id = None
        if TYPE_CHECKING:  # running: start() set them (no cost at run time)
            assert self._loop is not None and self._deadlines is not None
        future: asyncio.Future[tuple[zmq.Frame, MessageMetadata]] = self._loop.create_future()
        stream = self._streams.get((topic.name, participant_id)) or self._open_stream(
            topic.name, participant_id
        )
        payload = topic.encode(message)
        if len(payload) > self.max_message_bytes:
            self._refuse_oversize(topic.name, len(payload))
        message_id = self._send_frames(
            stream, payload, participant_id, source, correlation_id, None, self._inbox, None
        )
        self._pending[message_id] = future
        # The reader resolves the future and the asking task resumes in the next loop pass;
        # the shared deadline timer fails it on timeout. asyncio.wait_for would add a
        # loop pass and a second future per ask (p50 1.59x -> 1.48x raw), a timer per
        # ask 1.7 us.
        self._deadlines.add(future, timeout, topic.name)
        return message_id, future

    async def _take_reply(
        self,
        message_id: str,
        future: asyncio.Future[tuple[zmq.Frame, MessageMetadata]],
        reply_type: Any,
    ) -> Any:
        """The reply of the ask ``message_id``, decoded as ``reply_type``."""
        try:
            frame, metadata = await future
        finally:
            self._pending.pop(message_id, None)
        if metadata.error is not None:
            raise AskError(f"ask: {metadata.source} failed: {metadata.error}")
        decoder = self._reply_decoders.get(reply_type)
        if decoder is None:
            decoder = self._reply_decoders[reply_type] = msgspec.msgpack.Decoder(reply_type)
        return decoder.decode(frame)  # type: ignore[arg-type]  # a Frame is a buffer

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
        if not self._running:
            raise RuntimeClosedError(f"ask_stream: runtime {self.name!r} is not running")
        if not source or source.isspace():
            raise ValueError(f"source: must be a non-empty name, not {source!r}")
        if max_buffered < 1:
            raise ValueError("ask_stream: max_buffered must be >= 1")
        if participant_id is GLOBAL:
            participant_id = None
        decoder = self._reply_decoders.get(reply_type)
        if decoder is None:
            decoder = self._reply_decoders[reply_type] = msgspec.msgpack.Decoder(reply_type)
        stream = self._streams.get((topic.name, participant_id)) or self._open_stream(
            topic.name, participant_id
        )
        payload = topic.encode(message)
        if len(payload) > self.max_message_bytes:
            self._refuse_oversize(topic.name, len(payload))
        message_id = self._send_frames(
            stream, payload, participant_id, source, None, None, self._inbox, None
        )
        replies: ReplyStream[Any] = ReplyStream(
            decoder.decode,
            lambda: self._pending.pop(message_id, None),
            lambda metadata: AskError(f"ask: {metadata.source} failed: {metadata.error}"),
            max_buffered,
        )
        self._pending[message_id] = replies  # type: ignore[assignment]  # a future's API
        deadlines = self._deadlines
        assert deadlines is not None  # set while running
        deadlines.add(replies, timeout, topic.name)  # type: ignore[arg-type]  # a future's API
        return replies

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
            error,
        )

    def handler_failed(
        self, actor: str, topic: Topic, metadata: MessageMetadata, error: BaseException | str
    ) -> None:
        """Count and log a handler's failure (aggregated per actor, topic and sender) and
        answer an ask with the error."""
        self._counters["handler_errors"] += 1
        self.actor_fault(actor, "handler", topic, metadata, error)
        if metadata.reply_to is not None:
            text = repr(error) if isinstance(error, BaseException) else error
            try:
                self.reply(metadata, None, error=text)
            except Exception as reply_error:
                self.actor_fault(actor, "reply", topic, metadata, reply_error)

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
        self._counters["faults"] += 1
        self._warnings.warn(
            f"actor.{step}_failed",
            topic.name,
            metadata.sender,
            actor=actor,
            participant=metadata.participant_id,
            error=repr(error) if isinstance(error, BaseException) else error,
        )

    def mailbox_restarted(self, actor: str, error: BaseException | None) -> None:
        """A mailbox task ended although it never should: the mailbox started a new one."""
        self._counters["actor_restarts"] += 1
        self._log.error("actor.mailbox_restarted", actor=actor, error=repr(error))

    # ------------------------------------------------------------------ receiving

    def _on_readable(self) -> None:
        """Drain the SUB socket from the event loop's reader callback, in batches.

        Running the dispatch in the callback itself (not in a task it wakes) saves an
        event-loop pass per wake-up: a reply resolves its ask, and a message reaches
        its mailbox, in the same pass that noticed the socket. ZeroMQ's descriptor is
        edge-triggered and this socket is only read, so draining until EAGAIN re-arms
        it; a full batch yields to the actors and continues on the next pass. After
        the first message, the drain asks ZeroMQ whether more is waiting (``_readable``)
        instead of running into an EAGAIN: a lone message is the common case, and the
        question costs less (1.2 against 2.7 us), and re-arms the descriptor as well.

        An ask's reply, or a request queued behind other messages, also ends the batch
        early if more is waiting: the asking task (or the asked actor) runs first, and the
        rest of the drain comes after it, off the round trip. (A request that started its
        handler in the drain needs no such break, see ``_dispatch``.)

        Every frame's "more" flag is checked, so a message with the wrong number of
        frames is rejected alone and never takes its neighbours with it. The metadata
        and payload frames are decoded straight from ZeroMQ's buffers, never copied.
        """
        if TYPE_CHECKING:  # the reader is registered only while the socket is open
            assert self._sub is not None and self._loop is not None
        recv, dispatch = self._sub.recv, self._dispatch
        for position in range(_DRAIN_BATCH):
            try:
                first = recv(_NOBLOCK, copy=False)
            except zmq.Again:
                return
            except zmq.ZMQError:  # the socket was closed under us during stop()
                return
            key = first.bytes
            frames = 1
            if first.more:
                metadata = recv(_NOBLOCK, copy=False)
                frames = 2
                if metadata.more:
                    payload = recv(_NOBLOCK, copy=False)
                    frames = 3
                    if not payload.more:
                        try:
                            answered = dispatch(key, metadata, payload, position == 0)
                        except (
                            Exception
                        ) as error:  # a bug here must not stop the reader (edge-triggered)
                            answered = False
                            self._counters["faults"] += 1
                            self._warnings.warn(
                                "bus.dispatch_failed",
                                key[:200].decode(errors="replace"),
                                None,
                                level="error",
                                error=repr(error),
                            )
                        if (answered or position == 0) and not self._readable():
                            return
                        if answered:
                            break
                        continue
                    while payload.more:
                        payload = recv(_NOBLOCK, copy=False)
                        frames += 1
            self._reject("frames", key, frames=frames)
        self._drain_handle = self._loop.call_soon(self._resume_drain)

    def _resume_drain(self) -> None:
        """Continue a drain that yielded, if anything is left (after an ask's reply, usually
        not)."""
        if self._readable():
            self._on_readable()

    def _readable(self) -> bool:
        """Whether a message is waiting: ZeroMQ's EVENTS, which also re-arms the edge-triggered
        descriptor, as a drain that ends in EAGAIN does, for less than the EAGAIN costs."""
        if TYPE_CHECKING:  # called from the reader only
            assert self._sub is not None
        try:
            return bool(cast(int, self._sub.get(_EVENTS)) & _POLLIN)
        except zmq.ZMQError:  # closed during stop()
            return False

    def _reject(self, category: str, key: bytes, sender: str | None = None, **fields: Any) -> None:
        """Count a rejected message under its category (``edge_checks``) and log it, aggregated."""
        self._counters["rejected"] += 1
        self._rejected_by[category] = self._rejected_by.get(category, 0) + 1
        topic = key[: key.find(SEP)] if SEP in key else key[:64]
        self._warnings.warn(
            "bus.frame_rejected",
            topic.decode(errors="replace"),
            sender,
            category=category,
            rule=EnvelopeCheck.describe(category),
            key=key[:200].decode(errors="replace"),
            **fields,
        )

    def _dispatch(
        self, key: bytes, metadata_frame: zmq.Frame, payload: zmq.Frame, first: bool
    ) -> bool | None:
        """Validate one message and hand it on; True if it was an ask's reply, or a request
        that could not start at once (the drain then yields, so its actor runs before the
        rest of a burst is read).

        A request (an ask: ``reply_to`` set) that is the first message of its drain may
        start its handler at once (``Mailbox.offer``): its asker is waiting on the reply.
        Everything else is queued and each actor takes its share in one pass, which costs
        less per message in a burst. One-way messages were started at once too, at
        first; during a compaction storm that made the turns' tail worse (storm p99 /
        idle p99 1.24-1.41, against 1.11 with requests only).
        """
        parts = key.split(SEP, 2)
        if len(parts) != 3 or not parts[0]:
            self._reject("key", key)
            return None
        name, pid, suffix = parts
        if suffix:
            self._readiness.returned(key)
            return None
        try:
            metadata = _metadata_decoder.decode(metadata_frame)  # type: ignore[arg-type]  # a buffer
        except _DECODE_ERRORS as error:
            self._reject(metadata_category(error), key, error=str(error))
            return None
        category = self._check.reject(pid, metadata)
        if category is not None:
            self._reject(category, key, metadata.sender)
            return None
        first_missing = self._tracker.observe(key, metadata.sender, metadata.epoch, metadata.seq)
        if first_missing:
            if first_missing == STALE:
                self._counters["stale"] += 1
                self._warnings.warn(
                    "bus.stale",
                    name.decode(errors="replace"),
                    metadata.sender,
                    key=key.decode(errors="replace"),
                    epoch=metadata.epoch,
                    seq=metadata.seq,
                )
                return None
            self._record_gap(
                name, metadata.participant_id, metadata, first_missing, metadata.seq - 1
            )
        if name == _METRICS_NAME and metadata.sender != self.name:
            self._on_heartbeat(payload, metadata)
        if name == self._inbox_bytes:
            future = self._pending.get(metadata.correlation_id or "")
            if future is not None and not future.done():
                future.set_result((payload, metadata))
                return True
            return None
        routes = self._routes.get(name)
        if not routes:
            routes = self._private_routes.get(name)
            if routes:
                return self._dispatch_private(key, pid, routes, metadata, payload, first)
            return None
        try:
            message = routes[0].topic.decode(payload)  # type: ignore[arg-type]  # a Frame is a buffer
        except _DECODE_ERRORS as error:
            self._reject("payload", key, metadata.sender, error=str(error))
            return None
        start = first and INLINE_START and metadata.reply_to is not None
        for route in routes:
            if route.participant is not None and pid and route.participant != pid:
                continue
            if route.mailbox is not None:
                self._offer(route.mailbox, (route.handler, message, metadata, route.topic), start)
            else:
                if TYPE_CHECKING:  # a route has a mailbox or a keyed kind
                    assert route.keyed is not None
                for mailbox in self._keyed_targets(route.keyed, metadata.participant_id):
                    self._offer(
                        mailbox,
                        (
                            getattr(mailbox.agent, route.handler_name),
                            message,
                            metadata,
                            route.topic,
                        ),
                        start,
                    )
        return metadata.reply_to is not None and not start

    def _dispatch_private(
        self,
        key: bytes,
        pid: bytes,
        routes: list[Route],
        metadata: MessageMetadata,
        payload: zmq.Frame,
        first: bool,
    ) -> bool | None:
        """``_dispatch``'s delivery for a topic whose type is not deeply immutable: the first
        delivery takes the message decoded to validate it, every further one decodes its own,
        so no subscriber can change what another receives. (Shared topics never come here:
        their path is the one above, with no per-route cost.)"""
        topic = routes[0].topic
        try:
            message = topic.decode(payload)  # type: ignore[arg-type]  # a Frame is a buffer
        except _DECODE_ERRORS as error:
            self._reject("payload", key, metadata.sender, error=str(error))
            return None
        start = first and metadata.reply_to is not None
        fresh = False
        for route in routes:
            if route.participant is not None and pid and route.participant != pid:
                continue
            if route.mailbox is not None:
                targets = [(route.mailbox, route.handler)]
            else:  # a route has a mailbox or a keyed kind
                keyed = cast(KeyedKind, route.keyed)
                targets = [
                    (mailbox, getattr(mailbox.agent, route.handler_name))
                    for mailbox in self._keyed_targets(keyed, metadata.participant_id)
                ]
            for mailbox, handler in targets:
                if fresh:
                    message = topic.decode(payload)  # type: ignore[arg-type]  # a Frame is a buffer
                fresh = True
                self._offer(mailbox, (handler, message, metadata, route.topic), start)
        return metadata.reply_to is not None and not start

    def _offer(self, mailbox: Mailbox, delivery: Any, start: bool) -> None:
        if self._closed and mailbox.name in self._finished:  # stopping, and this actor has stopped
            return
        if mailbox.offer(delivery, start):
            self._counters["delivered"] += 1
            return
        self._counters["overflow"] += 1
        metadata = delivery[2]
        self._warnings.warn(
            "actor.mailbox_overflow",
            delivery[3].name,
            metadata.sender,
            actor=mailbox.name,
            participant=metadata.participant_id,
            seq=metadata.seq,
        )

    def _record_gap(
        self,
        name: bytes,
        participant_id: str | None,
        metadata: MessageMetadata,
        first_missing: int,
        last_missing: int,
    ) -> None:
        """Count and log a gap, and tell the actors of its topic that override ``on_gap``,
        in order with their messages (before the message that revealed it)."""
        gap = Gap(
            name.decode(errors="replace"),
            participant_id,
            metadata.sender,
            metadata.epoch,
            first_missing,
            last_missing,
        )
        self.gaps.append(gap)
        self._counters["gaps"] += gap.count
        self._warnings.warn(
            "bus.gap",
            gap.topic,
            gap.sender,
            participant=gap.participant_id,
            epoch=gap.epoch,
            first_missing=gap.first_missing,
            last_missing=gap.last_missing,
        )
        routes = self._routes.get(name) or self._private_routes.get(name)
        if not routes:
            return
        notice = msgspec.structs.replace(metadata, reply_to=None, participant_id=participant_id)
        for route in routes:
            if (
                route.participant is not None
                and participant_id is not None
                and route.participant != participant_id.encode()
            ):
                continue
            if route.mailbox is not None:
                targets = [route.mailbox]
            elif participant_id is None:
                targets = list(cast(KeyedKind, route.keyed).instances.values())
            else:
                found = cast(KeyedKind, route.keyed).instances.get(participant_id)
                targets = [] if found is None else [found]
            for mailbox in targets:
                if type(mailbox.agent).on_gap is not Agent.on_gap:
                    self._offer(mailbox, (mailbox.agent.on_gap, gap, notice, route.topic), False)

    def _on_heartbeat(self, payload: zmq.Frame, metadata: MessageMetadata) -> None:
        """Another runtime's heartbeat: report the lost tail of every stream it lists."""
        try:
            heartbeat = _heartbeat_decoder.decode(payload)  # type: ignore[arg-type]  # a buffer
        except _DECODE_ERRORS:
            return  # counted as a payload reject by the routes that decode it (xrmq top)
        # A sender that started after this runtime's subscriptions were live sent all of its
        # messages on them to this runtime: a stream of it with no baseline here lost them all
        # (a one-shot ``xrmq publish``). Not after an eviction of the stream table (a baseline
        # may have been forgotten), nor on a CURVE bus (the broker may narrow subscriptions).
        since = self._live_since_us
        whole = (
            since is not None
            and metadata.epoch > since
            and self.credentials is None
            and not self._tracker.evicted
        )
        for wire_key, last_sent in heartbeat.last_seq.items():
            key = wire_key.encode()
            first_missing = self._tracker.catch_up(
                key,
                metadata.sender,
                metadata.epoch,
                last_sent,
                bound_here=whole and key.startswith(self._live_prefixes),
            )
            if first_missing:
                name, _, rest = key.partition(SEP)
                participant = rest[:-1].decode(errors="replace") or None
                self._record_gap(name, participant, metadata, first_missing, last_sent)

    # ------------------------------------------------------------------ heartbeat streams
    # (the metrics snapshot and the heartbeat loop: metrics.py)

    def _final_heartbeat(self) -> None:
        """Announce the last seq of every stream this runtime numbered (``HEARTBEAT_KEYS`` per
        heartbeat), so a receiver counts a tail lost just before this runtime stopped."""
        streams = [stream for stream in self._streams.values() if stream[_SEQ]]
        for start in range(0, len(streams), HEARTBEAT_KEYS):
            listed = {s[_KEY].decode(): s[_SEQ] for s in streams[start : start + HEARTBEAT_KEYS]}
            try:
                self.send(METRICS_TOPIC, self.metrics(listed), source="runtime")
            except Exception as error:
                self._log.error("runtime.final_heartbeat_failed", error=repr(error))
                return

    def _recent_last_seqs(self) -> dict[str, int]:
        """The heartbeat's ``last_seq``: every stream that sent since the last heartbeat, and the
        others up to ``HEARTBEAT_KEYS`` of them, in turn (see ``HEARTBEAT_KEYS``)."""
        streams = list(self._streams.values())
        listed: dict[str, int] = {}
        for stream in streams:
            if stream[_SEQ] != stream[_BEAT]:
                stream[_BEAT] = stream[_SEQ]
                listed[stream[_KEY].decode()] = stream[_SEQ]
        if len(streams) <= HEARTBEAT_KEYS:
            chosen = streams
        else:
            start = self._beat_cursor % len(streams)
            chosen = (streams[start:] + streams[:start])[:HEARTBEAT_KEYS]
            self._beat_cursor = start + HEARTBEAT_KEYS
        for stream in chosen:
            if stream[_SEQ]:
                listed[stream[_KEY].decode()] = stream[_SEQ]
        return listed
