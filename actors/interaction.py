"""Publishing helpers for ``ResponseOutput`` (docs/interaction.md): ``ResponseOutputs`` and
``Reply``.

A producer says *what* it emits (a reply to a request, an unprompted update, a
withdraw); the consumer (the voice renderer) decides when and how it is rendered. So
a producer never builds protocol messages, never picks interruption flags and never
chooses stream identifiers: ``Reply`` generates the ``response_id`` and owns stream
framing (fragments, then one empty terminator).

Works with any publisher that has
``async publish(topic, message, *, participant_id=..., source=...)``: an
``AgentRuntime``, a ``RuntimeContext`` or a test double.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Awaitable, Callable
from types import TracebackType
from typing import Any, Protocol

from xrmq.schemas import ResponseOutput
from xrmq.topics import Topic


class _Publisher(Protocol):
    async def publish(
        self, topic: Any, message: Any, *, participant_id: str | None = ..., source: str = ...
    ) -> Any: ...


def _require_name(value: object, owner: str, field: str) -> None:
    if not isinstance(value, str) or not value:
        raise ValueError(f"{owner}.{field}: must be a non-empty string")


class ResponseOutputs:
    """Publish replies and updates without building protocol messages.

    ``publisher`` has ``async publish(topic, message, *, participant_id=...)``;
    ``topic`` carries ``ResponseOutput``; ``source`` is passed to ``publish`` as the
    producer name (omitted when None, so a ``RuntimeContext`` uses its agent's name);
    ``closed_errors`` are the exception types meaning "the consumer is already closed",
    which ``Reply`` suppresses when they come from its terminator.
    """

    def __init__(
        self,
        publisher: _Publisher,
        topic: Topic[ResponseOutput],
        *,
        source: str | None = None,
        closed_errors: tuple[type[BaseException], ...] = (),
    ) -> None:
        if not callable(getattr(publisher, "publish", None)):
            raise ValueError("ResponseOutputs.publisher: must have an async publish() method")
        if not isinstance(topic, Topic) or topic.message_type is not ResponseOutput:
            raise ValueError("ResponseOutputs.topic: must be a Topic carrying ResponseOutput")
        if source is not None:
            _require_name(source, "ResponseOutputs", "source")
        if not isinstance(closed_errors, tuple) or not all(
            isinstance(error, type) and issubclass(error, BaseException) for error in closed_errors
        ):
            raise ValueError("ResponseOutputs.closed_errors: must be a tuple of exception types")
        self.publisher = publisher
        self.topic = topic
        self.source = source
        self.closed_errors = closed_errors

    async def update(
        self,
        participant_id: str,
        text: str,
        *,
        urgent: bool = False,
        timestamp_us: int | None = None,
    ) -> None:
        """Publish unprompted information; blank text publishes nothing.

        An urgent update cuts the output being played and plays next.
        """
        _require_name(participant_id, "ResponseOutputs.update", "participant_id")
        if not text.strip():
            return
        await self._publish(
            participant_id,
            ResponseOutput(kind="update", text=text, urgent=urgent, timestamp_us=timestamp_us),
        )

    async def withdraw(self, participant_id: str) -> None:
        """Drop this producer's updates for a participant that have not started playing.

        Output already playing and other producers' updates are kept.
        """
        _require_name(participant_id, "ResponseOutputs.withdraw", "participant_id")
        await self._publish(participant_id, ResponseOutput(kind="withdraw"))

    def reply(
        self,
        participant_id: str,
        *,
        request_id: str,
        timestamp_us: int | None = None,
        started: Callable[[], Awaitable[None]] | None = None,
    ) -> Reply:
        """Return the context manager for one reply to ``request_id``.

        ``started`` is awaited once, before the first fragment is published.
        """
        return Reply(
            self, participant_id, request_id=request_id, timestamp_us=timestamp_us, started=started
        )

    async def _publish(self, participant_id: str, message: ResponseOutput) -> None:
        if self.source is None:
            await self.publisher.publish(self.topic, message, participant_id=participant_id)
        else:
            await self.publisher.publish(
                self.topic, message, participant_id=participant_id, source=self.source
            )


def _being_cancelled() -> bool:
    task = asyncio.current_task()
    return task is not None and task.cancelling() > 0


class Reply:
    """Async context manager that publishes one reply, streamed or single.

    Contract (docs/interaction.md):

    * Every :meth:`send` publishes one fragment; leaving the context publishes the empty
      terminator that completes the reply. A single-message reply is one send.
    * Fragments that are blank before the first published fragment are skipped.
    * ``started`` is awaited once, before the first fragment is published.
    * A cancelled task never publishes: ``send`` raises ``asyncio.CancelledError`` when
      the current task is being cancelled, even if the code it awaited swallowed the
      cancellation.
    * On exit (normal, by exception or by cancellation) the terminator is published iff
      a fragment was published and no publish failed. A failed publish is never retried
      or closed, and later sends raise ``RuntimeError`` (the consumer would otherwise
      hear a reply with a hole in it). ``closed_errors`` of the ``ResponseOutputs`` are
      suppressed only when they come from the terminator.
    * ``send`` after the context exits raises ``RuntimeError``; so does ``send`` before
      it is entered, since only the context can publish the terminator.
    """

    def __init__(
        self,
        outputs: ResponseOutputs,
        participant_id: str,
        *,
        request_id: str,
        timestamp_us: int | None = None,
        started: Callable[[], Awaitable[None]] | None = None,
    ) -> None:
        if not isinstance(outputs, ResponseOutputs):
            raise ValueError("Reply.outputs: must be a ResponseOutputs")
        _require_name(participant_id, "Reply", "participant_id")
        _require_name(request_id, "Reply", "request_id")
        if timestamp_us is not None and timestamp_us < 0:
            raise ValueError("Reply.timestamp_us: must be >= 0")
        if started is not None and not callable(started):
            raise ValueError("Reply.started: must be an async callable")
        self._outputs = outputs
        self.participant_id = participant_id
        self.request_id = request_id
        self.timestamp_us = timestamp_us
        self.response_id = uuid.uuid4().hex
        """Stream identifier, generated here: producers never choose it."""
        self._started = started
        self._entered = False
        self._published = False
        self._failed = False
        self._exited = False
        self._delivered = False

    @property
    def delivered(self) -> bool:
        """Whether the terminator was published; meaningful after the context exits."""
        return self._delivered

    async def __aenter__(self) -> Reply:
        if self._entered:
            raise RuntimeError("Reply: a reply context can be entered once")
        self._entered = True
        return self

    async def send(self, text: str) -> None:
        """Publish one fragment of the reply."""
        if not self._entered:
            raise RuntimeError("Reply.send: enter the reply with 'async with' first")
        if self._exited:
            raise RuntimeError("Reply.send: the reply has exited its context")
        if self._failed:
            raise RuntimeError("Reply.send: an earlier publish of this reply failed")
        if _being_cancelled():
            raise asyncio.CancelledError("Reply.send: the task is being cancelled")
        if not self._published and not text.strip():
            return
        if self._started is not None:
            started, self._started = self._started, None
            await started()
            if _being_cancelled():
                raise asyncio.CancelledError("Reply.send: the task is being cancelled")
        await self._publish(text, final=False)
        self._published = True

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> bool:
        self._exited = True
        if not self._published or self._failed:
            return False
        try:
            await self._publish("", final=True)
        except self._outputs.closed_errors:
            return False
        self._delivered = True
        return False

    async def _publish(self, text: str, *, final: bool) -> None:
        message = ResponseOutput(
            kind="reply",
            text=text,
            request_id=self.request_id,
            response_id=self.response_id,
            final=final,
            timestamp_us=self.timestamp_us,
        )
        try:
            await self._outputs._publish(self.participant_id, message)
        except BaseException:
            self._failed = True
            raise
