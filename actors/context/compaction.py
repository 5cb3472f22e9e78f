"""Compaction requests and results: what a compaction worker receives and returns.

The engine builds a request; a worker sends ``system_prompt`` and ``user_message`` to the
model as-is and returns the text with its finish reason (or an error). Both travel over
the bus, so they are msgspec Structs and carry only data.

A request's system prompt is one of the ``CompactionPrompts`` followed by the size limit
and the plain-text format (seed 000: the manager adds them, custom prompts do not state
them). Its user message is the delimited material: the previous summary, then the
entries oldest first, each as rendered into prompts (with its time), separated by blank
lines. Delimiters tell the model where data starts and ends, so it summarizes the
material rather than answering it.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Literal

import msgspec

CompactionKind = Literal["compact", "condense"]
"""``compact`` merges the previous summary with entries; ``condense`` shortens a summary."""

FORMAT_INSTRUCTION = "Write plain text only: no Markdown, headings, lists, preamble or closing remarks."
"""The output format appended to every compaction prompt."""


def compaction_limit_instruction(limit_bytes: int) -> str:
    """The sentence that states a summary's size limit to the model.

    Interim definition: ``xrmq.actors.models`` will export the canonical sentence (the
    offline model parses it); this function is to be replaced by that one.
    """
    return f"The summary must be at most {limit_bytes} bytes of UTF-8 text."


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
    """``prompt`` followed by the size limit and the plain-text format."""
    return f"{prompt}\n\n{compaction_limit_instruction(limit_bytes)} {FORMAT_INSTRUCTION}"


def compact_message(previous_summary: str, entries: Sequence[str]) -> str:
    """User message that merges ``previous_summary`` (may be empty) with ``entries``."""
    material = "<material>\n" + "\n\n".join(entries) + "\n</material>"
    if not previous_summary:
        return material
    return f"<previous_summary>\n{previous_summary}\n</previous_summary>\n\n{material}"


def condense_message(summary: str) -> str:
    """User message that asks for ``summary`` to be shortened."""
    return f"<summary>\n{summary}\n</summary>"
