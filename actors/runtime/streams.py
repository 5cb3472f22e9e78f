"""``ReplyStream``: every reply to one ask, as they arrive (``AgentRuntime.ask_stream``).

An ask resolves on its first reply; a handler that answers in parts (a tool streaming
its result) replies several times to one request, each a message on the asker's inbox
naming the request. The stream stands where an ask's future stands (the reader hands
it each reply, the deadline timer and ``stop()`` fail it), so the reader's path is the
ask's path: nothing is added to it. Iterating yields the decoded replies in order; the
replier's protocol says which is the last (the caller then closes the stream). At most
``max_buffered`` replies wait for the reader: beyond that the stream fails with
``ReplyOverflow`` (the replier outran its caller), never growing without bound.
"""

from __future__ import annotations

import asyncio
from collections import deque
from collections.abc import Callable
from typing import Any, Generic, TypeVar

import msgspec

from xrmq.schemas import MessageMetadata

T = TypeVar("T")


class ReplyOverflow(RuntimeError):
    """More replies arrived than a ``ReplyStream`` buffers (``max_buffered``)."""


class ReplyStream(Generic[T]):
    """The replies to one ask (see the module docstring); use ``async with`` or ``close()``.

    ``async for reply in stream`` yields each reply decoded as the ask's ``reply_type``;
    raises ``TimeoutError`` once the ask's deadline passed, ``AskError`` for an error
    reply, ``RuntimeClosedError`` when the runtime stops, ``ReplyOverflow`` as above.
    """

    __slots__ = (
        "_ask_error",
        "_closed",
        "_decode",
        "_error",
        "_items",
        "_max",
        "_release",
        "_waiter",
    )

    def __init__(
        self,
        decode: Callable[[Any], T],
        release: Callable[[], object],
        ask_error: Callable[[MessageMetadata], BaseException],
        max_buffered: int,
    ) -> None:
        self._decode = decode
        self._release = release
        self._ask_error = ask_error
        self._max = max_buffered
        self._items: deque[tuple[Any, MessageMetadata]] = deque()
        self._waiter: asyncio.Future[None] | None = None
        self._error: BaseException | None = None
        self._closed = False

    # --- what the reader, the deadline timer and stop() call (an ask's future's API) ----

    def done(self) -> bool:
        return self._closed or self._error is not None

    def set_result(self, reply: tuple[Any, MessageMetadata]) -> None:
        if self.done():
            return
        if len(self._items) >= self._max:
            self.set_exception(
                ReplyOverflow(f"ask_stream: more than {self._max} replies waited for the reader")
            )
            return
        self._items.append(reply)
        self._wake()

    def set_exception(self, error: BaseException) -> None:
        if not self.done():
            self._error = error
            self._wake()

    def _wake(self) -> None:
        waiter = self._waiter
        if waiter is not None and not waiter.done():
            waiter.set_result(None)

    # --- the caller's side ----------------------------------------------------------

    def __aiter__(self) -> ReplyStream[T]:
        return self

    async def __anext__(self) -> T:
        while not self._items:
            if self._error is not None:
                self.close()  # a failed stream lets go of its entry at once
                raise self._error
            if self._closed:
                raise StopAsyncIteration
            self._waiter = asyncio.get_running_loop().create_future()
            try:
                await self._waiter
            finally:
                self._waiter = None
        payload, metadata = self._items.popleft()
        if metadata.error is not None:
            raise self._ask_error(metadata)
        try:
            return self._decode(payload)
        except (msgspec.DecodeError, msgspec.ValidationError):
            self.close()
            raise

    def close(self) -> None:
        """Stop receiving: later replies are dropped; iteration ends (a failure already
        raised stays raised)."""
        if not self._closed:
            self._closed = True
            self._items.clear()
            self._release()
            self._wake()

    async def __aenter__(self) -> ReplyStream[T]:
        return self

    async def __aexit__(self, *exc: object) -> None:
        self.close()
