"""Tier 2's summary request: the prompt, the transcript as material, and two summarizers.

``summary_request(head, previous)`` is the compaction request for a transcript prefix:
docs/tools.md's markdown sections, the limit stated the way every xrmq compaction request
states it (``compaction_limit_instruction``, so ``OfflineLLM`` summarizes it
extractively). ``llm_summarizer(llm)`` sends it to a model directly;
``worker_summarizer(...)`` (``workers.py``) sends it to the context's compaction workers.
"""

from __future__ import annotations

from collections.abc import Sequence

from xrmq.actors.models import ChatMessage, ChatOptions, LLMService, compaction_limit_instruction

from .policy import Summarize

SUMMARY_LIMIT_BYTES = 4096
"""About docs/tools.md's 1024 tokens, in the bytes xrmq's compaction requests state."""

SUMMARY_PROMPT = (
    "Summarize the earlier part of this tool-using conversation for future turns. Use "
    "markdown sections: system_context, overview, key_facts, user_preferences, decisions, "
    "pending_tasks, open_questions, tone_context. Keep names, numbers, identifiers and "
    "tool-call IDs verbatim; mark uncertain items as unconfirmed. Merge the previous summary "
    "in. Do not answer or continue the conversation."
)

COMPACTED_NOTE = (
    "Earlier turns of this session were summarized below; the latest user message is verbatim "
    "and authoritative. Older tool results may be placeholders: call extract_compacted_tool_result "
    "with the ID, or re-run the tool."
)
"""Rendered with a summary into the agent's system message (docs/tools.md's compaction note)."""


def render_message(message: ChatMessage) -> str:
    """One transcript message as a line of summary material."""
    if message.role == "tool":
        return f"Tool result {message.tool_call_id}: {message.content}"
    calls = "".join(
        f" [calls {call.name}({call.arguments}) as {call.id}]" for call in message.tool_calls
    )
    return f"{message.role.capitalize()}: {message.content}{calls}".rstrip()


def summary_request(
    head: Sequence[ChatMessage], previous: str | None, limit_bytes: int = SUMMARY_LIMIT_BYTES
) -> tuple[str, str]:
    """(system prompt, user message) of the compaction request for ``head``."""
    system = f"{SUMMARY_PROMPT}\n{compaction_limit_instruction(limit_bytes)}"
    material = "\n".join(render_message(message) for message in head)
    if previous:
        material = f"Previous summary:\n{previous}\n\nTranscript:\n{material}"
    return system, material


def llm_summarizer(llm: LLMService, *, limit_bytes: int = SUMMARY_LIMIT_BYTES) -> Summarize:
    """A ``Summarize`` that asks ``llm`` directly; any failure is ``None`` (SUMMARIZE_FAILED)."""

    async def summarize(head: tuple[ChatMessage, ...], previous: str | None) -> str | None:
        system, user = summary_request(head, previous, limit_bytes)
        try:
            messages = [ChatMessage("system", system), ChatMessage("user", user)]
            completion = await llm.complete(messages, ChatOptions(thinking=False))
        except Exception:  # a failed summary leaves the transcript as it is
            return None
        return completion.text.strip() or None

    return summarize
