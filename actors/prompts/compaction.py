"""The phrase that marks a request as a compaction request, and states its size limit.

The context manager appends ``compaction_limit_instruction(limit)`` to every compaction
system prompt (the seed: "the manager adds the size limit and the plain-text output
format to every prompt"). ``OfflineLLM`` recognises a compaction request by this same
phrase through ``compaction_limit``, so the two stay in step by construction. A prompt
that wants its summary in named markdown sections says so with ``sections_instruction``,
recognised the same way (``summary_sections``).
"""

from __future__ import annotations

import re

COMPACTION_LIMIT_PATTERN = re.compile(r"Write at most (\d+) bytes of plain text\.")
"""Matches the phrase built by ``compaction_limit_instruction``; group 1 is the limit."""


def compaction_limit_instruction(limit_bytes: int) -> str:
    """The sentence stating a compaction summary's limit in UTF-8 bytes and its format."""
    if isinstance(limit_bytes, bool) or not isinstance(limit_bytes, int) or limit_bytes <= 0:
        raise ValueError("compaction_limit_instruction.limit_bytes: must be a positive integer")
    return f"Write at most {limit_bytes} bytes of plain text."


def compaction_limit(system_prompt: str) -> int | None:
    """The limit stated in ``system_prompt``, or ``None`` if it is not a compaction prompt.

    The last match wins, so a custom prompt that quotes the phrase is overridden by the
    line the manager appends.
    """
    matches = COMPACTION_LIMIT_PATTERN.findall(system_prompt)
    return int(matches[-1]) if matches else None


SECTIONS_PATTERN = re.compile(r"Use markdown sections: (\w+(?:, \w+)*)\.")
"""Matches the phrase built by ``sections_instruction``; group 1 lists the sections."""


def sections_instruction(names: tuple[str, ...]) -> str:
    """The sentence asking for a summary in the markdown sections ``names``, in order."""
    if not names or not all(re.fullmatch(r"\w+", name) for name in names):
        raise ValueError("sections_instruction.names: must be one or more words")
    return f"Use markdown sections: {', '.join(names)}."


def summary_sections(system_prompt: str) -> tuple[str, ...]:
    """The sections a compaction prompt asks for (empty: it names none)."""
    matches = SECTIONS_PATTERN.findall(system_prompt)
    return tuple(matches[-1].split(", ")) if matches else ()
