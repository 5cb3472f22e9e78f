"""Compaction requests and results: what a compaction worker receives and returns.

The engine builds a request; a worker sends ``system_prompt`` and ``user_message`` to the
model as-is and returns the text with its finish reason (or an error). Both travel over
the bus, so they are msgspec Structs and carry only data.

A request's system prompt is one of the ``CompactionPrompts`` followed by the size limit
and the plain-text format (docs/context.md: the manager adds them, custom prompts do not state
them). Its user message is the delimited material: the previous summary, then the
entries oldest first, each as rendered into prompts (with its time), separated by blank
lines. Tags delimit the material (the offline model drops tag lines), so the model
sees where data starts and ends and summarizes it rather than answering it.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Literal

import msgspec

from xrmq.actors.prompts.compaction import compaction_limit_instruction

CompactionKind = Literal["compact", "condense"]
"""``compact`` merges the previous summary with entries; ``condense`` shortens a summary."""

FORMAT_DETAIL = "Use no Markdown, headings or lists, and no preamble or closing remarks."
"""Spells out the plain-text format after the models' limit sentence."""


class JobRef(msgspec.Struct, frozen=True):
    """Identity of one compaction job: the section, its state's generation, the job number.

    A result applies only to the state whose pending job has exactly this identity.
    """

    section: str
    generation: str
    job_id: int


class CompactionRequest(msgspec.Struct, frozen=True):
    """One model request that writes or shortens a section's summary."""

    job: JobRef
    kind: CompactionKind
    system_prompt: str
    """Compaction prompt, then the size limit and the plain-text format."""
    user_message: str
    """The delimited material to summarize."""
    limit_bytes: int
    """The summary's size limit: a quarter of the section's budget."""


class CompactionResult(msgspec.Struct, frozen=True):
    """A worker's answer to a ``CompactionRequest``.

    ``finish_reason="length"`` means the model was cut off at its output limit; ``error``
    describes a failed or timed-out call (the text is then ignored).
    """

    job: JobRef
    text: str = ""
    finish_reason: str | None = None
    error: str | None = None


def system_prompt(prompt: str, limit_bytes: int) -> str:
    """``prompt`` followed by the size limit and the plain-text format.

    The limit sentence is ``prompts.compaction.compaction_limit_instruction`` (the offline model
    recognises a compaction request by it and reads the limit from it), last in the
    prompt apart from the format detail, so a custom prompt cannot override it.
    """
    return f"{prompt}\n\n{compaction_limit_instruction(limit_bytes)} {FORMAT_DETAIL}"


def compact_message(previous_summary: str, entries: Sequence[str]) -> str:
    """User message that merges ``previous_summary`` (may be empty) with ``entries``."""
    material = "<material>\n" + "\n\n".join(entries) + "\n</material>"
    if not previous_summary:
        return material
    return f"<previous_summary>\n{previous_summary}\n</previous_summary>\n\n{material}"


def condense_message(summary: str) -> str:
    """User message that asks for ``summary`` to be shortened."""
    return f"<summary>\n{summary}\n</summary>"
