"""Asks in flight: a request sent through the runtime's ``send`` with this runtime's inbox as
``reply_to``, and its reply awaited.

The receiver resolves a reply's future by correlation id (``pending``) in the same pass that
read it; one shared deadline timer (``deadlines.py``) fails an ask on timeout, where
``asyncio.wait_for`` would add a loop pass and a second future per ask and a timer per ask
would cost more. A reply is decoded as the type the asker gave (one decoder per type, kept).
A handler that answers later returns ``DEFERRED_REPLY``.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import msgspec
import zmq

from xrmq.schemas import MessageMetadata
from xrmq.topics import Topic

from .deadlines import AskDeadlines
from .exceptions import AskError, RuntimeClosedError
from .scope import GLOBAL, Scope
from .streams import ReplyStream

Reply = asyncio.Future[tuple[zmq.Frame, MessageMetadata]]
Send = Callable[..., str]
"""``AgentRuntime.send``."""


class _DeferredReply:
    __slots__ = ()

    def __repr__(self) -> str:
        return "DEFERRED_REPLY"


DEFERRED_REPLY: Any = _DeferredReply()
"""What a handler returns to answer an ask later: it keeps ``ctx.metadata`` and calls
``runtime.reply(metadata, result)`` itself (a tool server runs each call as a task, so
one slow call does not hold up the next)."""


class Asks:
    """The asks of one runtime; see the module docstring. ``start`` hands it the loop."""

    def __init__(self, send: Send, inbox: str) -> None:
        self._send = send
        self._inbox = inbox
        self.pending: dict[str, Reply] = {}
        """The asks in flight by message id: a future, or a ``ReplyStream`` (a future's API)."""
        self._decoders: dict[Any, msgspec.msgpack.Decoder] = {}
        self._loop: asyncio.AbstractEventLoop | None = None
        self._deadlines: AskDeadlines | None = None

    def start(self, loop: asyncio.AbstractEventLoop) -> None:
        self._loop = loop
        self._deadlines = AskDeadlines(loop)

    def send(
        self,
        topic: Topic,
        message: Any,
        participant_id: str | Scope | None,
        source: str,
        timeout: float,
        correlation_id: str | None,
    ) -> tuple[str, Reply]:
        """Send an ask's request now (still while actors stop: an ``on_stop`` may ask): its
        message id and the future its reply resolves."""
        message_id = self._send(
            topic,
            message,
            participant_id=None if participant_id is GLOBAL else participant_id,
            source=source,
            correlation_id=correlation_id,
            reply_to=self._inbox,
        )
        if TYPE_CHECKING:  # sent: the runtime runs and start() set them (no cost at run time)
            assert self._loop is not None and self._deadlines is not None
        future: Reply = self._loop.create_future()
        self.pending[message_id] = future
        self._deadlines.add(future, timeout, topic.name)
        return message_id, future

    async def take(self, message_id: str, future: Reply, reply_type: Any) -> Any:
        """The reply of the ask ``message_id``, decoded as ``reply_type``."""
        try:
            frame, metadata = await future
        finally:
            self.pending.pop(message_id, None)
        if metadata.error is not None:
            raise AskError(f"ask: {metadata.source} failed: {metadata.error}")
        decoder = self._decoders.get(reply_type)
        if decoder is None:
            decoder = self._decoders[reply_type] = msgspec.msgpack.Decoder(reply_type)
        return decoder.decode(frame)  # type: ignore[arg-type]  # a Frame is a buffer

    def stream(
        self,
        topic: Topic,
        message: Any,
        reply_type: Any,
        participant_id: str | Scope | None,
        source: str,
        timeout: float,
        max_buffered: int,
    ) -> ReplyStream[Any]:
        """``AgentRuntime.ask_stream``: every reply of one request, as they arrive."""
        if max_buffered < 1:
            raise ValueError("ask_stream: max_buffered must be >= 1")
        decoder = self._decoders.get(reply_type)
        if decoder is None:
            decoder = self._decoders[reply_type] = msgspec.msgpack.Decoder(reply_type)
        message_id = self._send(
            topic,
            message,
            participant_id=None if participant_id is GLOBAL else participant_id,
            source=source,
            reply_to=self._inbox,
        )
        pending = self.pending
        replies: ReplyStream[Any] = ReplyStream(
            decoder.decode,
            lambda: pending.pop(message_id, None),
            lambda metadata: AskError(f"ask: {metadata.source} failed: {metadata.error}"),
            max_buffered,
        )
        pending[message_id] = replies  # type: ignore[assignment]  # a future's API
        deadlines = self._deadlines
        assert deadlines is not None  # set while running
        deadlines.add(replies, timeout, topic.name)  # type: ignore[arg-type]  # a future's API
        return replies

    def close(self) -> None:
        """The runtime stops: every ask in flight fails, the deadline timer stops."""
        for future in self.pending.values():
            if not future.done():
                future.set_exception(RuntimeClosedError("ask: the runtime stopped"))
        self.pending.clear()
        if self._deadlines is not None:
            self._deadlines.close()
