"""``LLMService``: the one typed, streamed chat interface every model call goes through.

Answers, compaction summaries and routing decisions all call ``stream()`` (or
``complete()``, which collects a stream). The request is validated in the caller's frame,
so bad input raises ``ValueError`` before any provider is contacted.

Closing is the consumer's job and must be prompt: ``async with llm.stream(...) as s``
closes the provider stream when the block exits, whether it finished, failed, broke out
early or was cancelled; a consumer cancelled while it awaits a chunk closes the provider
stream even without the block, because the cancellation runs through the generator.
"""

from __future__ import annotations

import abc
import asyncio
from collections.abc import AsyncGenerator, Mapping, Sequence
from types import TracebackType
from typing import Any

from .openai_messages import request_messages
from .types import (
    ChatCompletion,
    ChatMessage,
    ChatOptions,
    ChatRequest,
    ChatResult,
    FinishReason,
    ToolCall,
    ToolSpec,
    Usage,
)


class ChatStream:
    """Text chunks of one response, then its ``result``.

    Iterate it for non-empty text chunks. ``result`` is ``None`` while chunks may still
    come, and set once the stream ends: the provider's finish reason and usage on
    completion, ``finish_reason="error"`` after it raised, ``"cancelled"`` after it was
    cancelled or closed before the end.
    """

    def __init__(self, model: str, source: AsyncGenerator[str | ChatResult, None]) -> None:
        self.model = model
        self.result: ChatResult | None = None
        self._source = source

    @property
    def finish_reason(self) -> FinishReason | None:
        return None if self.result is None else self.result.finish_reason

    @property
    def usage(self) -> Usage | None:
        return None if self.result is None else self.result.usage

    @property
    def tool_calls(self) -> tuple[ToolCall, ...]:
        """The tool calls the response asked for; known once the stream ended."""
        return () if self.result is None else self.result.tool_calls

    def __aiter__(self) -> ChatStream:
        return self

    async def __anext__(self) -> str:
        while self.result is None:
            try:
                item = await anext(self._source)
            except StopAsyncIteration:
                self.result = ChatResult("stop")
                break
            except asyncio.CancelledError:
                self.result = ChatResult("cancelled")
                raise
            except BaseException:
                self.result = ChatResult("error")
                raise
            if isinstance(item, ChatResult):
                self.result = item
                await self._source.aclose()
            elif item:
                return item
        raise StopAsyncIteration

    async def aclose(self) -> None:
        """Close the provider stream now; idempotent. An unfinished stream ends ``cancelled``."""
        if self.result is None:
            self.result = ChatResult("cancelled")
        await self._source.aclose()

    async def __aenter__(self) -> ChatStream:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.aclose()


class LLMService(abc.ABC):
    """A chat model: messages in, streamed text chunks out, finish reason and usage last.

    Implementations override ``_generate``. Failures raise ``ModelError`` subclasses
    (``xrmq.actors.models.errors``) that name the model and the reason.
    """

    def __init__(self, model: str) -> None:
        self.model = model

    def prepare(self) -> None:  # noqa: B027  (optional: a no-op unless a service needs it)
        """Do the slow one-time work of the first call now (imports, client set-up).

        A process calls it before it reports ready, so its first turn is no slower than
        the next. The default has nothing to prepare.
        """

    def stream(
        self,
        messages: Sequence[ChatMessage | Mapping[str, Any]],
        options: ChatOptions | None = None,
        *,
        tools: Sequence[ToolSpec] = (),
    ) -> ChatStream:
        """Start one request. Raises ``ValueError`` for an invalid request, here and now.

        ``messages`` are ``ChatMessage`` s or OpenAI's typed chat messages (dictionaries,
        sent as they are by a service speaking OpenAI's format: ``ChatRequest.openai``).
        With ``tools`` the model may answer with tool calls instead of (or besides)
        text: the stream's ``tool_calls`` once it ended.
        """
        chosen = ChatOptions() if options is None else options
        views, given = request_messages(messages)
        request = ChatRequest(views, chosen, tuple(tools), given)
        return ChatStream(self.model, self._generate(request))

    async def complete(
        self,
        messages: Sequence[ChatMessage | Mapping[str, Any]],
        options: ChatOptions | None = None,
        *,
        tools: Sequence[ToolSpec] = (),
    ) -> ChatCompletion:
        """Run one request to the end and return its whole text with the finish reason."""
        async with self.stream(messages, options, tools=tools) as stream:
            text = "".join([chunk async for chunk in stream])
        result = stream.result
        assert result is not None  # set when iteration ends
        return ChatCompletion(
            text, result.finish_reason, result.usage, result.tool_calls, result.reasoning
        )

    @abc.abstractmethod
    def _generate(self, request: ChatRequest) -> AsyncGenerator[str | ChatResult, None]:
        """Yield the response's text chunks, then optionally one ``ChatResult``.

        The ``ChatResult`` carries the tool calls the model asked for (when the request
        had ``tools``) and its reasoning content.

        A generator that ends without a ``ChatResult`` finished with ``stop`` and
        unknown usage. Release provider resources in ``finally``: it runs when the
        consumer closes the stream or is cancelled.
        """
