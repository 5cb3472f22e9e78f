"""``OfflineLLM``: the built-in default model, so the demo and the tests need no network.

Deterministic and visibly dependent on its input (see ``extractive``):

- A request whose system prompt states a compaction limit (``compaction_limit``) gets an
  extractive summary of the other messages within that limit, in the markdown sections
  the prompt names when it names some (``summary_sections``, ``sectioned``).
- A request with tools calls one when the user's words match a tool's name or
  description, and answers from the tool's result once it is there (``offline_tools``).
- Any other request is a turn: the last message is what the user said and the messages
  between the system prompt and it are the context (the answer layout is system prompt,
  context, current request). A question is answered with the best-matching context
  facts (the user's own words in the second person; never the clock line, its own
  earlier answers or the user's earlier questions), or says plainly that nothing
  matches; a statement is acknowledged ("Noted: your badge number is 4471."), a
  greeting greeted (``extractive.reply``).

It streams word-sized chunks paced like a small local model, so latency benchmarks that
run on it are meaningful; ``time_to_first_token_s=0, tokens_per_second=0`` removes
the pacing. ``ChatOptions.max_tokens`` counts chunks: a longer reply is cut off and ends
with ``finish_reason="length"``.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncGenerator, Awaitable, Callable

from xrmq.actors.prompts.compaction import compaction_limit, summary_sections

from .chunking import chunk_count, word_chunks
from .extractive import content_lines, extractive_summary, reply
from .offline_tools import answer_after_tools, choose_tool_call
from .sectioned import sectioned_summary
from .service import LLMService
from .types import ChatRequest, ChatResult, FinishReason, Usage


class OfflineLLM(LLMService):
    """The built-in, deterministic, extractive model.

    ``time_to_first_token_s`` (>= 0) is waited before the first chunk and
    ``1 / tokens_per_second`` between chunks; ``tokens_per_second=0`` streams without
    pacing (zero delays still yield to the event loop between chunks). ``sleep`` is the awaitable
    used for waiting (tests inject one that records).
    """

    def __init__(
        self,
        *,
        time_to_first_token_s: float = 0.25,
        tokens_per_second: float = 40.0,
        model: str = "offline",
        sleep: Callable[[float], Awaitable[object]] = asyncio.sleep,
    ) -> None:
        if not time_to_first_token_s >= 0:
            raise ValueError("OfflineLLM.time_to_first_token_s: must be non-negative")
        if not tokens_per_second >= 0:
            raise ValueError("OfflineLLM.tokens_per_second: must be non-negative (0: no pacing)")
        super().__init__(model)
        self.time_to_first_token_s = float(time_to_first_token_s)
        self.tokens_per_second = float(tokens_per_second)
        self._sleep = sleep

    def respond(self, request: ChatRequest) -> str:
        """The whole reply to ``request``, before any ``max_tokens`` cut-off."""
        messages = request.messages
        has_system = messages[0].role == "system"
        limit = compaction_limit(messages[0].content) if has_system else None
        if limit is not None:
            material = "\n".join(message.content for message in messages[1:])
            sections = summary_sections(messages[0].content)
            if sections:
                return sectioned_summary(material, sections, limit)
            return extractive_summary(material, limit)
        after_tools = answer_after_tools(request)
        if after_tools is not None:
            return after_tools
        context = [
            line
            for message in messages[int(has_system) : -1]
            for line in content_lines(message.content)
        ]
        return reply(messages[-1].content, context)

    async def _generate(self, request: ChatRequest) -> AsyncGenerator[str | ChatResult, None]:
        call = choose_tool_call(request)
        if call is not None:
            await self._sleep(self.time_to_first_token_s)
            yield ChatResult("stop", self._usage(request, 1), (call,))
            return
        chunks = word_chunks(self.respond(request))
        finish: FinishReason = "stop"
        max_tokens = request.options.max_tokens
        if max_tokens is not None and len(chunks) > max_tokens:
            chunks, finish = chunks[:max_tokens], "length"
        gap = 1.0 / self.tokens_per_second if self.tokens_per_second else 0.0
        await self._sleep(self.time_to_first_token_s)
        for index, chunk in enumerate(chunks):
            if index:
                await self._sleep(gap)
            yield chunk
        yield ChatResult(finish, self._usage(request, len(chunks)))

    @staticmethod
    def _usage(request: ChatRequest, output_tokens: int) -> Usage:
        input_tokens = sum(chunk_count(message.content) for message in request.messages)
        return Usage(input_tokens=input_tokens, output_tokens=output_tokens)
