"""``ScriptedLLM``: a model that plays back queued responses, for tests (yours and ours).

Each request takes the next ``ScriptedResponse`` (a plain string is a response with
that text) and records the request, so a test can assert exactly what was sent and make
the model answer, stall, fail or cut off exactly when it wants.
"""

from __future__ import annotations

import asyncio
from collections import deque
from collections.abc import AsyncGenerator, Awaitable, Callable
from dataclasses import dataclass

from .chunking import word_chunks
from .errors import ModelError
from .service import LLMService
from .types import ChatRequest, ChatResult, FinishReason, ToolCall, Usage

Responder = Callable[[ChatRequest], "ScriptedResponse | str"]
"""A scripted step that looks at the request first (e.g. to call a tool with an id it reads)."""


@dataclass(frozen=True)
class ScriptedResponse:
    """One scripted reply.

    - ``text`` streams in word-sized chunks, or as the given ``chunks``.
    - ``first_chunk_delay_s`` is awaited before the first chunk and ``chunk_delay_s``
      between chunks.
    - ``error`` is raised after ``error_after_chunks`` chunks (0: before the first).
    - ``finish_reason`` ends a complete stream: ``"length"`` scripts a cut-off.
    - ``hang=True`` waits after the chunks until the stream is cancelled or closed.
    - ``usage`` is reported at the end.
    - ``tool_calls`` are the calls the response asks for (reported at the end, after
      any text); ``reasoning`` is its reasoning content, under ``reasoning_field`` (None:
      the field is not reported).
    """

    text: str = ""
    chunks: tuple[str, ...] | None = None
    first_chunk_delay_s: float = 0.0
    chunk_delay_s: float = 0.0
    error: BaseException | None = None
    error_after_chunks: int = 0
    finish_reason: FinishReason = "stop"
    hang: bool = False
    usage: Usage = Usage()  # noqa: RUF009  (a frozen Struct: one shared default is safe)
    tool_calls: tuple[ToolCall, ...] = ()
    reasoning: str | None = None
    reasoning_field: str | None = None

    def __post_init__(self) -> None:
        if self.chunks is not None and self.text:
            raise ValueError("ScriptedResponse.chunks: give either text or chunks, not both")
        if self.first_chunk_delay_s < 0:
            raise ValueError("ScriptedResponse.first_chunk_delay_s: must be non-negative")
        if self.chunk_delay_s < 0:
            raise ValueError("ScriptedResponse.chunk_delay_s: must be non-negative")
        if not 0 <= self.error_after_chunks <= len(self.stream_chunks()):
            raise ValueError(
                "ScriptedResponse.error_after_chunks: must be between 0 and the number of chunks"
            )
        if self.error is not None and self.hang:
            raise ValueError("ScriptedResponse.hang: cannot be combined with error")
        if self.finish_reason not in ("stop", "length", "content_filter"):
            raise ValueError(
                "ScriptedResponse.finish_reason: must be stop, length or content_filter"
            )

    def stream_chunks(self) -> tuple[str, ...]:
        """The chunks this response streams."""
        return self.chunks if self.chunks is not None else tuple(word_chunks(self.text))


class ScriptedLLM(LLMService):
    """Plays queued responses in order and records every request.

    ``requests`` lists every request received, in order. ``open_streams`` counts streams
    started and not yet finished, failed, cancelled or closed: zero after a test means no
    generation was left running; ``wait_streaming()`` is the handshake for "the model
    is generating now". With the queue empty a request takes ``default`` if given, else
    raises ``ModelError`` ("script exhausted").
    """

    def __init__(
        self,
        *responses: ScriptedResponse | str | Responder,
        default: ScriptedResponse | str | Responder | None = None,
        model: str = "scripted",
        sleep: Callable[[float], Awaitable[object]] = asyncio.sleep,
    ) -> None:
        super().__init__(model)
        self.requests: list[ChatRequest] = []
        self.open_streams = 0
        self._stream_opened = asyncio.Event()
        self.default = None if default is None else _as_item(default)
        self._queue: deque[ScriptedResponse | Responder] = deque()
        self._sleep = sleep
        self.push(*responses)

    def push(self, *responses: ScriptedResponse | str | Responder) -> None:
        """Queue more responses after those already queued."""
        self._queue.extend(_as_item(response) for response in responses)

    async def wait_streaming(self, count: int = 1) -> None:
        """Return once at least ``count`` streams are open at the same time."""
        while self.open_streams < count:
            self._stream_opened.clear()
            await self._stream_opened.wait()

    @property
    def pending(self) -> int:
        """Responses still queued."""
        return len(self._queue)

    async def _generate(self, request: ChatRequest) -> AsyncGenerator[str | ChatResult, None]:
        self.requests.append(request)
        if self._queue:
            item = self._queue.popleft()
        elif self.default is not None:
            item = self.default
        else:
            raise ModelError(
                self.model, f"script exhausted after {len(self.requests) - 1} responses"
            )
        response = item if isinstance(item, ScriptedResponse) else _as_response(item(request))
        self.open_streams += 1
        self._stream_opened.set()
        try:
            chunks = response.stream_chunks()
            for index in range(len(chunks) + 1):
                if response.error is not None and index == response.error_after_chunks:
                    raise response.error
                if index == len(chunks):
                    break
                await self._sleep(
                    response.first_chunk_delay_s if index == 0 else response.chunk_delay_s
                )
                yield chunks[index]
            if response.hang:
                await asyncio.Event().wait()
            yield ChatResult(
                response.finish_reason,
                response.usage,
                response.tool_calls,
                response.reasoning,
                response.reasoning_field,
            )
        finally:
            self.open_streams -= 1


def _as_response(response: ScriptedResponse | str) -> ScriptedResponse:
    return ScriptedResponse(response) if isinstance(response, str) else response


def _as_item(item: ScriptedResponse | str | Responder) -> ScriptedResponse | Responder:
    return ScriptedResponse(item) if isinstance(item, str) else item
