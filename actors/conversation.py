"""Conversation: the application-instructed conversation agent (docs/context.md), a RoutableAgent.

The conversation owns its prompt and its answer; the ``ContextManager`` it is given owns
what is remembered. It never creates, clears or closes the manager: the application
does, and may share it with other agents.

An answer request is exactly three messages (docs/context.md, "Prompt layout"):

1. system: the system prompt (``system_prompt`` or the default ``prompts/core.txt``),
   then the application ``instructions``. It holds no clock, so it is an identical
   prefix across requests.
2. user: the participant's context (summaries first, then entries in recorded-time
   order, as ``ContextManager.blocks`` renders them, after ``ContextManager.ensure``
   fetched a participant its replica had evicted), then the current time last.
3. user: the current request.

Publishing (docs/context.md): the answer is a reply to the turn id on ``output_topic``, with the
routing name as source and the turn's timestamp, through ``ResponseOutputs``. The first
nonblank chunk awaits ``started()``; once a chunk was published, an empty final frame
closes the reply whether the answer completed, failed or was cancelled; a cancelled
answer publishes no further text. Failures propagate after the model stream is closed.
The exchange is recorded in the context only after the final frame was published.

The result carries the turn's model stages (``DestinationStages``, ``schemas/stages.py``):
when the model request was sent, the first token came and the first chunk was
published, the usage (the provider's, else estimated from the text), and the size of each
context section the request carried against its budget (when the context reports it:
``ContextManager.section_sizes``), so the router's ``TurnRecord`` has them without a
message of their own (three clock reads a turn).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import Any, Protocol

from xrmq.actors.clock import now_us
from xrmq.actors.context.render import format_time
from xrmq.actors.interaction import ResponseOutputs
from xrmq.actors.models import ChatMessage, ChatOptions, LLMService, ModelError, Usage
from xrmq.actors.models.openai_messages import message_text
from xrmq.actors.prompts import load_prompt
from xrmq.actors.routing.destination import ClosingDestination, answer_prologue
from xrmq.actors.runtime import get_logger
from xrmq.schemas import (
    AgentTurn,
    ContextBlock,
    DestinationResult,
    DestinationStages,
    ResponseOutput,
    RoutingAid,
    TurnUsage,
)
from xrmq.topics import Topic

DEFAULT_ROUTE = "conversation"
"""Source of the answer when no router names the conversation (a direct ``answer()`` call)."""

DEFAULT_ROUTING = RoutingAid(
    "General conversation: answers questions from general knowledge and from the participant's "
    "earlier dialogue and background context, and holds the conversation."
)

CONTEXT_HEADER = "Earlier context in time order:"
"""First line of the context message when there is prior context."""


def default_system_prompt() -> str:
    """The default system prompt: a general assistant answering from its knowledge and the
    context."""
    return load_prompt("core")


class ParticipantContext(Protocol):
    """What the conversation needs from a ``ContextManager``."""

    def blocks(self, participant_id: str) -> tuple[ContextBlock, ...]: ...

    def record_exchange(
        self,
        participant_id: str,
        request: str,
        answer: str,
        *,
        timestamp_us: int,
        exchange_id: object | None,
    ) -> None: ...

    def reconcile_history(
        self,
        participant_id: str,
        exchanges: Sequence[tuple[str, str, int | None]],
        *,
        exchange_ids: Sequence[object | None],
    ) -> None: ...


def system_message(system_prompt: str, instructions: str) -> str:
    """The system prompt followed by the application instructions (when there are any)."""
    return f"{system_prompt}\n\n{instructions}" if instructions.strip() else system_prompt


def context_message(blocks: Sequence[ContextBlock], now_us: int) -> str:
    """The participant's context blocks in the order given, then the current time last."""
    now = f"Current time: {format_time(now_us)}"
    if not blocks:
        return now
    return "\n\n".join([CONTEXT_HEADER, *(block.text for block in blocks), now])


def answer_messages(
    system: str,
    blocks: Sequence[ContextBlock],
    now_us: int,
    request: str,
    images: tuple[str, ...] = (),
) -> list[ChatMessage]:
    """The three messages of an answer request (the request's images after its text)."""
    return [
        ChatMessage("system", system),
        ChatMessage("user", context_message(blocks, now_us)),
        ChatMessage("user", request, images=images),
    ]


CHARS_PER_TOKEN = 4
"""The estimate of a token's length when the provider reports no usage (English text)."""


def estimate_tokens(text: str) -> int:
    """About how many tokens ``text`` is: one per ``CHARS_PER_TOKEN`` characters, at least one."""
    return max(1, -(-len(text) // CHARS_PER_TOKEN))


def turn_usage(
    usage: Usage | None, messages: Sequence[ChatMessage | Mapping[str, Any]], answer: str
) -> TurnUsage:
    """The answer's usage for the turn record: the provider's counts and cost, or, when it
    reported no counts, an estimate from the request's and the answer's text."""
    if usage is not None and usage.input_tokens is not None and usage.output_tokens is not None:
        return TurnUsage(
            usage.input_tokens, usage.output_tokens, usage.reasoning_tokens, cost_usd=usage.cost_usd
        )
    prompt = sum(estimate_tokens(message_text(message)) for message in messages)
    return TurnUsage(prompt, estimate_tokens(answer), estimated=True)


def add_usage(total: TurnUsage | None, more: TurnUsage) -> TurnUsage:
    """Two model calls' usage added up (one answer of several calls): a count or cost
    either lacks is unknown, and the sum is estimated when either was."""

    def plus(a: Any, b: Any) -> Any:
        return None if a is None or b is None else a + b

    if total is None:
        return more
    reasoning = (
        None
        if total.reasoning_tokens is None and more.reasoning_tokens is None
        else (total.reasoning_tokens or 0) + (more.reasoning_tokens or 0)
    )
    return TurnUsage(
        plus(total.prompt_tokens, more.prompt_tokens),
        plus(total.completion_tokens, more.completion_tokens),
        reasoning,
        total.estimated or more.estimated,
        plus(total.cost_usd, more.cost_usd),
    )


class Conversation(ClosingDestination):
    """Application-instructed conversation agent over participant-scoped context.

    ``llm`` answers; ``context`` (a ``ContextManager``) is rendered into every request
    and receives each completed exchange, never cleared or closed here;
    ``instructions`` (domain, role, tone, policy) follow the system prompt, which
    ``system_prompt`` replaces entirely; ``routing`` is the front-end metadata (default
    ``DEFAULT_ROUTING``); ``runtime`` (anything with the runtime's async ``publish``)
    and ``output_topic`` (carrying ``ResponseOutput``) publish the answers. No topic is
    subscribed. ``options`` are the answer requests' model options; ``clock`` gives the
    current time in Unix microseconds.
    """

    def __init__(
        self,
        llm: LLMService,
        *,
        context: ParticipantContext,
        instructions: str = "",
        system_prompt: str | None = None,
        routing: RoutingAid | None = None,
        runtime: Any,
        output_topic: Topic[ResponseOutput],
        options: ChatOptions | None = None,
        clock: Callable[[], int] = now_us,
    ) -> None:
        if not callable(getattr(llm, "stream", None)):
            raise ValueError("Conversation.llm: must be an LLMService")
        for method in ("blocks", "record_exchange", "reconcile_history"):
            if not callable(getattr(context, method, None)):
                raise ValueError(
                    f"Conversation.context: must be a ContextManager (it lacks {method})"
                )
        if not isinstance(instructions, str):
            raise ValueError("Conversation.instructions: must be a string")
        if system_prompt is not None and not (
            isinstance(system_prompt, str) and system_prompt.strip()
        ):
            raise ValueError("Conversation.system_prompt: must be non-empty text or None")
        if routing is not None and not isinstance(routing, RoutingAid):
            raise ValueError("Conversation.routing: must be a RoutingAid or None")
        if not callable(getattr(runtime, "publish", None)):
            raise ValueError("Conversation.runtime: must be an AgentRuntime")
        if not (isinstance(output_topic, Topic) and output_topic.message_type is ResponseOutput):
            raise ValueError("Conversation.output_topic: must be a Topic carrying ResponseOutput")
        self.llm = llm
        self.context = context
        self.instructions = instructions
        self.system_prompt = default_system_prompt() if system_prompt is None else system_prompt
        self.routing = DEFAULT_ROUTING if routing is None else routing
        self.runtime = runtime
        self.output_topic = output_topic
        self.options = ChatOptions() if options is None else options
        self._system = system_message(self.system_prompt, instructions)
        self._clock = clock
        self._closed = False
        self._section_sizes = getattr(context, "section_sizes", None)
        """The context's sizes per section against their budgets, when it reports them
        (``ContextManager.section_sizes``): the turn record's ``context``."""
        name = getattr(runtime, "name", None)
        self._runtime_name = name if isinstance(name, str) else None

    def request(self, turn: AgentTurn) -> list[ChatMessage]:
        """The three messages of the answer request for ``turn``, from the context as it is now."""
        return answer_messages(
            self._system,
            self.context.blocks(turn.participant_id),
            self._clock(),
            turn.text,
            turn.images,
        )

    async def answer(
        self, turn: AgentTurn, *, started: Callable[[], Awaitable[None]]
    ) -> DestinationResult:
        """Stream the answer to ``turn`` as a reply on ``output_topic``; see the module docstring.

        The turn's history is first reconciled into the context (exchanges it already
        holds are not replayed). Returns the complete text as response context. Raises
        ``RuntimeError`` after ``close()``, ``ModelError`` when the model produced no
        text, and whatever the model or the publication raised.
        """
        if self._closed:
            raise RuntimeError("Conversation.answer: the conversation is closed")
        route = await answer_prologue(turn, DEFAULT_ROUTE, self.context)
        pid = turn.participant_id
        messages = self.request(turn)
        sizes = self._section_sizes(pid) if self._section_sizes is not None else ()
        outputs = ResponseOutputs(self.runtime, self.output_topic, source=route)
        parts: list[str] = []
        clock = now_us  # stage times: the wall clock, as the router's (``clock`` is the prompt's)
        first_token_us = first_chunk_us = None
        async with outputs.reply(
            pid, request_id=turn.turn_id, timestamp_us=turn.timestamp_us, started=started
        ) as reply:
            request_us = clock()
            async with self.llm.stream(messages, self.options) as stream:
                async for chunk in stream:
                    if first_token_us is None:
                        first_token_us = clock()
                        await reply.send(chunk)
                        first_chunk_us = clock()
                    else:
                        await reply.send(chunk)
                    parts.append(chunk)
        text = "".join(parts).strip()
        if not text:
            raise ModelError(self.llm.model, "the answer was empty")
        if stream.finish_reason != "stop":  # the logger bound only then: 11 us a turn
            log = get_logger(actor=route, participant=pid, turn=turn.turn_id)
            log.warning("conversation.answer_incomplete", finish_reason=stream.finish_reason)
        # Leaving the reply without an exception means its final frame was published.
        self.context.record_exchange(
            pid,
            turn.text,
            text,
            timestamp_us=turn.timestamp_us if turn.timestamp_us is not None else self._clock(),
            exchange_id=turn.turn_id,
        )
        stages = DestinationStages(
            self._runtime_name,
            self.llm.model,
            request_us,
            first_token_us,
            first_chunk_us,
            turn_usage(stream.usage, messages, text),
            context=sizes,
        )
        return DestinationResult(response=text, stages=stages)

    async def release(self, participant_id: str) -> None:
        """Keep completed participant context; this destination holds no active resources."""

    async def participant_left(self, participant_id: str) -> None:
        """Hold nothing for a departed participant; the context manager's owner clears its
        context."""

    async def close(self) -> None:
        """Stop answering new turns. The caller drains answers in flight and closes the context
        manager."""
        self._closed = True
