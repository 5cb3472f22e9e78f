"""Tier 2's summary request: the prompt, the transcript as material, the token bound, and
two summarizers.

``summary_request(head, previous)`` is the compaction request for a transcript prefix:
docs/tools.md's markdown sections (``SUMMARY_SECTIONS``, asked for with
``sections_instruction``), the limit stated the way every xrmq compaction request states
it (``compaction_limit_instruction``), so ``OfflineLLM`` writes the same sections
extractively. A summary must fit in ``SUMMARY_LIMIT_TOKENS`` counted by litellm's
tokenizer (``within_tokens``): one over is sent back once to be condensed
(``condense_request``), and cut at the limit if it is still over, so the bound holds
whatever the model does. ``llm_summarizer(llm)`` sends both requests to a model directly;
``WorkerSummarizer`` (``workers.py``) to the context's compaction workers.
"""

from __future__ import annotations

import asyncio
import re
from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import Any

from xrmq.actors.models import ChatMessage, ChatOptions, LLMService, compaction_limit_instruction
from xrmq.actors.models.openai_messages import message_dict, message_text
from xrmq.actors.prompts.compaction import sections_instruction

from .policy import Summarize

SUMMARY_SECTIONS = (
    "system_context",
    "overview",
    "key_facts",
    "user_preferences",
    "decisions",
    "pending_tasks",
    "open_questions",
    "tone_context",
)
"""docs/tools.md's sections of a summary, in order."""

SUMMARY_LIMIT_TOKENS = 1024
"""docs/tools.md: a summary is at most 1024 tokens, counted by the tokenizer."""

SUMMARY_LIMIT_BYTES = 4096
"""The size a summary request states to the model: about ``SUMMARY_LIMIT_TOKENS``."""


def summary_prompt(sections: tuple[str, ...] = SUMMARY_SECTIONS) -> str:
    """The summary request's instructions; ``sections`` () asks for plain prose (a realtime
    session's checkpoint: seed 003 names no sections, and its summary budget is a few
    hundred bytes, where section headers would crowd out facts)."""
    asked = f"{sections_instruction(sections)} " if sections else ""
    return (
        "Summarize the earlier part of this tool-using conversation for future turns. "
        f"{asked}Keep names, numbers, identifiers and "
        "tool-call IDs verbatim; mark uncertain items as unconfirmed. Merge the previous summary "
        "in. Do not answer or continue the conversation."
    )


SUMMARY_PROMPT = summary_prompt()

CONDENSE_PROMPT = (
    "Condense this summary of a tool-using conversation: shorter, the same facts. "
    f"{sections_instruction(SUMMARY_SECTIONS)} Keep names, numbers, identifiers and "
    "tool-call IDs verbatim."
)

COMPACTED_NOTE = (
    "Earlier turns of this session were summarized above; the latest user message is verbatim "
    "and authoritative. Older tool results may be placeholders: call extract_compacted_tool_result "
    "with the ID, or re-run the tool."
)
"""Follows the summary in the agent's system message (docs/tools.md's compaction note)."""

_SYSTEM_CONTEXT = re.compile(r"^#+\s*system_context\s*$", re.MULTILINE)
_NEXT_HEADER = re.compile(r"^#+\s*\w+\s*$", re.MULTILINE)


def compacted_system_message(summary: str, system_prompt: str) -> str:
    """The system message once a summary exists: seed 002's "summary + compaction note".

    The summary's ``system_context`` section is the agent's own system prompt, verbatim (a
    model's paraphrase of the operator's instructions would change what the agent does): it
    replaces the section the model wrote, or leads the summary when the model wrote none. An
    empty prompt leaves the summary as the model wrote it.
    """
    if system_prompt:
        own = f"## system_context\n{system_prompt.strip()}\n"
        found = _SYSTEM_CONTEXT.search(summary)
        if found is None:
            summary = f"{own}\n{summary.lstrip()}"
        else:
            after = _NEXT_HEADER.search(summary, found.end())
            rest = summary[after.start() :] if after is not None else ""
            summary = f"{summary[: found.start()]}{own}\n{rest}".rstrip()
    return f"{summary.rstrip()}\n\n{COMPACTED_NOTE}"


Ask = Callable[[str, str], Awaitable[str | None]]
"""``ask(system, user)``: one compaction request's text, or ``None`` when it failed."""


def render_message(message: Mapping[str, Any] | ChatMessage) -> str:
    """One message as a line of summary material: a transcript's (OpenAI's typed chat
    message), or a ``ChatMessage`` (a realtime session's items)."""
    if isinstance(message, ChatMessage):
        message = message_dict(message)
    text = message_text(message)
    if message["role"] == "tool":
        return f"Tool result {message.get('tool_call_id')}: {text}"
    calls = "".join(
        f" [calls {call['function']['name']}({call['function'].get('arguments') or ''})"
        f" as {call['id']}]"
        for call in message.get("tool_calls") or ()
    )
    return f"{message['role'].capitalize()}: {text}{calls}".rstrip()


def summary_request(
    head: Sequence[Mapping[str, Any] | ChatMessage],
    previous: str | None,
    limit_bytes: int = SUMMARY_LIMIT_BYTES,
    sections: tuple[str, ...] = SUMMARY_SECTIONS,
) -> tuple[str, str]:
    """(system prompt, user message) of the compaction request for ``head``."""
    system = f"{summary_prompt(sections)}\n{compaction_limit_instruction(limit_bytes)}"
    material = "\n".join(render_message(message) for message in head)
    if previous:
        material = f"Previous summary:\n{previous}\n\nTranscript:\n{material}"
    return system, material


def condense_request(summary: str, limit_bytes: int) -> tuple[str, str]:
    """(system prompt, user message) asking for ``summary`` shorter, in the same sections."""
    return f"{CONDENSE_PROMPT}\n{compaction_limit_instruction(limit_bytes)}", summary


def count_text_tokens(text: str, model: str = "") -> int:
    """``text``'s tokens by litellm's tokenizer for ``model`` (unknown: its default)."""
    from xrmq.actors.models.litellm_service import import_litellm

    return int(import_litellm().token_counter(model=model, text=text))


def cut_to_tokens(text: str, limit: int, model: str = "") -> str:
    """The longest prefix of ``text`` within ``limit`` tokens, ended at a line or word."""
    from xrmq.actors.models.litellm_service import import_litellm

    litellm = import_litellm()
    tokens = litellm.encode(model=model, text=text)
    if len(tokens) <= limit:
        return text
    cut = str(litellm.decode(model=model, tokens=list(tokens[:limit])))
    end = max(cut.rfind("\n"), cut.rfind(" "))
    return (cut[:end] if end > 0 else cut).rstrip()


async def within_tokens(
    summary: str,
    ask: Ask,
    *,
    limit_tokens: int = SUMMARY_LIMIT_TOKENS,
    limit_bytes: int = SUMMARY_LIMIT_BYTES,
    model: str = "",
) -> str:
    """``summary`` when it fits ``limit_tokens``; else condensed by one more request; cut
    at the limit if that is still over. Tokenizing runs off the event loop."""
    if await asyncio.to_thread(count_text_tokens, summary, model) <= limit_tokens:
        return summary
    condensed = await ask(*condense_request(summary, limit_bytes))
    text = condensed.strip() if condensed and condensed.strip() else summary
    return await asyncio.to_thread(cut_to_tokens, text, limit_tokens, model)


def llm_summarizer(
    llm: LLMService,
    *,
    limit_bytes: int = SUMMARY_LIMIT_BYTES,
    limit_tokens: int = SUMMARY_LIMIT_TOKENS,
    sections: tuple[str, ...] = SUMMARY_SECTIONS,
) -> Summarize:
    """A ``Summarize`` that asks ``llm`` directly; any failure is ``None`` (SUMMARIZE_FAILED).
    ``sections``: the summary's markdown sections (``summary_prompt``; (): plain prose)."""

    async def ask(system: str, user: str) -> str | None:
        try:
            messages = [ChatMessage("system", system), ChatMessage("user", user)]
            completion = await llm.complete(messages, ChatOptions(thinking=False))
        except Exception:  # a failed summary leaves the transcript as it is
            return None
        return completion.text.strip() or None

    async def summarize(head: tuple[Any, ...], previous: str | None) -> str | None:
        summary = await ask(*summary_request(head, previous, limit_bytes, sections))
        if summary is None:
            return None
        return await within_tokens(
            summary, ask, limit_tokens=limit_tokens, limit_bytes=limit_bytes, model=llm.model
        )

    return summarize
