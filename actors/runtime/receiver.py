"""The receive path: the SUB socket drained from the event loop's reader callback, each
message checked and handed to its mailboxes.

``Receiver`` reads the registry's routing table (``registry.py``) and the asks in flight,
counts into the observation's counters (``observation.py``), and reports gaps (``sequence.py``)
as they are revealed, by a message or by another runtime's heartbeat. Every table and bound
method the hot path uses is bound once at construction, never looked up per message.

Hot path (``on_readable``, ``dispatch``): benchmark before and after a change here
(``python -m bench bus turn storm``, see ``bench/README.md``).
"""

from __future__ import annotations

import asyncio
import time
from collections import deque
from typing import TYPE_CHECKING, Any, cast

import msgspec
import zmq

from xrmq.schemas import MessageMetadata, RuntimeMetrics
from xrmq.topics import METRICS_TOPIC, SEP

from ._compat import INLINE_START
from .agent import Agent
from .edge_checks import DECODE_ERRORS, EnvelopeCheck, metadata_category
from .mailbox import Mailbox
from .observation import Observation
from .readiness import Readiness
from .registry import Registry
from .routes import KeyedKind, Route
from .sequence import STALE, Gap, SequenceTracker

_DRAIN_BATCH = 512
# pyzmq's multipart helpers convert flag enums per frame; plain ints with per-frame
# calls cost a third as much.
_NOBLOCK = int(zmq.NOBLOCK)
_EVENTS = int(zmq.EVENTS)
_POLLIN = int(zmq.POLLIN)

_metadata_decoder = msgspec.msgpack.Decoder(MessageMetadata)
_heartbeat_decoder = msgspec.msgpack.Decoder(RuntimeMetrics)
_METRICS_NAME = METRICS_TOPIC.name.encode()

Pending = dict[str, Any]
"""The asks in flight by message id: a future (or a ``ReplyStream``) the reply resolves."""


class Receiver:
    """The receive path of one runtime; see the module docstring. ``attach`` hands it the
    SUB socket and the loop when the runtime starts; ``finished`` holds the actors whose
    ``on_stop`` has run while the runtime stops (nothing more reaches them)."""

    def __init__(
        self,
        name: str,
        inbox: bytes,
        registry: Registry,
        pending: Pending,
        readiness: Readiness,
        tracker: SequenceTracker,
        observation: Observation,
        *,
        epoch_skew_s: float,
        curve: bool,
    ) -> None:
        self.name = name
        self._inbox_bytes = inbox
        self._routes = registry.routes
        self._private_routes = registry.private_routes
        self._keyed_targets = registry.keyed_targets
        self._pending = pending
        self._readiness = readiness
        self._tracker = tracker
        self._check = EnvelopeCheck(epoch_skew_s)
        self._counters = observation.counters
        self._rejected_by = observation.rejected_by
        self._warnings = observation.warnings
        self._curve = curve
        self.finished: set[str] = set()
        self.gaps: deque[Gap] = deque(maxlen=1000)
        """The most recent gaps (the ``gaps`` counter counts all of them)."""
        self._sub: zmq.Socket | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._drain_handle: asyncio.Handle | None = None
        self._fd: int | None = None
        self._live_since_us: int | None = None
        """When every subscription of ``start`` was live through the broker (µs, wall clock)."""
        self._live_prefixes: tuple[bytes, ...] = ()
        """Those subscriptions: a stream on one of them from a sender whose epoch is later was
        bound for this runtime from its first message (``_on_heartbeat``)."""

    def attach(self, sub: zmq.Socket, loop: asyncio.AbstractEventLoop) -> None:
        """Read ``sub`` from ``loop``'s reader callback, starting with what arrived already."""
        fd = sub.getsockopt(zmq.FD)
        assert isinstance(fd, int)  # ZeroMQ's descriptor
        self._sub, self._loop, self._fd = sub, loop, fd
        loop.add_reader(fd, self.on_readable)
        self._drain_handle = loop.call_soon(self.on_readable)

    def live(self, prefixes: tuple[bytes, ...]) -> None:
        """Every subscription (``prefixes``) is live through the broker from now on."""
        self._live_since_us = time.time_ns() // 1000
        self._live_prefixes = prefixes

    def detach(self) -> None:
        """Stop reading (the runtime stops)."""
        if self._fd is not None:
            asyncio.get_running_loop().remove_reader(self._fd)
            self._fd = None
        if self._drain_handle is not None:
            self._drain_handle.cancel()

    def on_readable(self) -> None:
        """Drain the SUB socket from the event loop's reader callback, in batches.

        Running the dispatch in the callback itself (not in a task it wakes) saves an
        event-loop pass per wake-up: a reply resolves its ask, and a message reaches
        its mailbox, in the same pass that noticed the socket. ZeroMQ's descriptor is
        edge-triggered and this socket is only read, so draining until EAGAIN re-arms
        it; a full batch yields to the actors and continues on the next pass. After
        the first message, the drain asks ZeroMQ whether more is waiting (``_readable``)
        instead of running into an EAGAIN: a lone message is the common case, and the
        question costs less than the EAGAIN, and re-arms the descriptor as well.

        An ask's reply, or a request queued behind other messages, also ends the batch
        early if more is waiting: the asking task (or the asked actor) runs first, and the
        rest of the drain comes after it, off the round trip. (A request that started its
        handler in the drain needs no such break, see ``dispatch``.)

        Every frame's "more" flag is checked, so a message with the wrong number of
        frames is rejected alone and never takes its neighbours with it. The metadata
        and payload frames are decoded straight from ZeroMQ's buffers, never copied.
        """
        if TYPE_CHECKING:  # the reader is registered only while the socket is open
            assert self._sub is not None and self._loop is not None
        recv, dispatch = self._sub.recv, self.dispatch
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
            self.on_readable()

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

    def dispatch(
        self, key: bytes, metadata_frame: zmq.Frame, payload: zmq.Frame, first: bool
    ) -> bool | None:
        """Validate one message and hand it on; True if it was an ask's reply, or a request
        that could not start at once (the drain then yields, so its actor runs before the
        rest of a burst is read).

        A request (an ask: ``reply_to`` set) that is the first message of its drain may
        start its handler at once (``Mailbox.offer``): its asker is waiting on the reply.
        Everything else is queued and each actor takes its share in one pass, which costs
        less per message in a burst. Starting one-way messages at once as well makes the
        turns' tail worse under a burst of updates (a compaction storm: ``bench/README.md``).
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
        except DECODE_ERRORS as error:
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
        except DECODE_ERRORS as error:
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
        """``dispatch``'s delivery for a topic whose type is not deeply immutable: the first
        delivery takes the message decoded to validate it, every further one decodes its own,
        so no subscriber can change what another receives. (Shared topics never come here:
        their path is the one above, with no per-route cost.)"""
        topic = routes[0].topic
        try:
            message = topic.decode(payload)  # type: ignore[arg-type]  # a Frame is a buffer
        except DECODE_ERRORS as error:
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
        if self.finished and mailbox.name in self.finished:  # stopping, and this actor stopped
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
        except DECODE_ERRORS:
            return  # counted as a payload reject by the routes that decode it (xrmq top)
        # A sender that started after this runtime's subscriptions were live sent all of its
        # messages on them to this runtime: a stream of it with no baseline here lost them all
        # (a one-shot ``xrmq publish``). Not after an eviction of the stream table (a baseline
        # may have been forgotten), nor on a CURVE bus (the broker may narrow subscriptions).
        since = self._live_since_us
        known = since is not None and not self._curve and not self._tracker.evicted
        self._catch_up(heartbeat.last_seq, metadata, known and metadata.epoch > since)  # type: ignore[operator]
        for tails in heartbeat.tails:  # the broker repeating stopped runtimes' final ones
            of = msgspec.structs.replace(metadata, sender=tails.sender, epoch=tails.epoch)
            self._catch_up(tails.last_seq, of, known and of.epoch > since)  # type: ignore[operator]

    def _catch_up(self, last_seq: dict[str, int], metadata: MessageMetadata, whole: bool) -> None:
        """Record the tails ``metadata``'s sender announced and this runtime never received."""
        for wire_key, last_sent in last_seq.items():
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
