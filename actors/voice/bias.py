"""Context-biased recognition: the recognizer's prompt from what the box knows. Pure.

Whisper takes an ``initial_prompt``: text it treats as what was said before, so words in
it (names, numbers, places) are recognized more readily. ``bias_prompt`` builds it from
a participant's ``ContextManager.blocks()`` (sensor notes, dialogue): a glossary of the
distinctive terms (capitalized names, numbers with their unit) followed by the newest
context text, clipped to ``max_chars`` (Whisper reads at most ~224 prompt tokens).
"""

from __future__ import annotations

import re
from collections.abc import Sequence

from xrmq.schemas import ContextBlock

_TERM = re.compile(r"\b(?:[A-Z][a-z]+(?:\s+[A-Z][a-z]+)*|\d+(?:[.,]\d+)?(?:\s*[A-Za-z%°]+)?)")
_COMMON = frozenset(
    {
        "The",
        "A",
        "An",
        "I",
        "It",
        "This",
        "That",
        "There",
        "User",
        "Assistant",
        "Summary",
        "Note",
        "Notes",
        "He",
        "She",
        "They",
        "We",
        "You",
        "In",
        "On",
    }
)


def bias_terms(text: str, limit: int = 24) -> list[str]:
    """Distinct names, places and numbers in ``text``, most recent first."""
    seen: dict[str, None] = {}
    for match in reversed(_TERM.findall(text)):
        term = match.strip()
        if term and term not in _COMMON and term not in seen:
            seen[term] = None
            if len(seen) >= limit:
                break
    return list(seen)


def bias_prompt(blocks: Sequence[ContextBlock], max_chars: int = 600) -> str | None:
    """The recognizer prompt for these context blocks; None when there is no context."""
    text = " ".join(block.text.strip() for block in blocks if block.text.strip())
    if not text:
        return None
    terms = bias_terms(text)
    glossary = f"Glossary: {', '.join(terms)}. " if terms else ""
    room = max(0, max_chars - len(glossary))
    tail = text[-room:] if room else ""
    if len(text) > room and " " in tail:
        tail = tail[tail.index(" ") + 1 :]
    return (glossary + tail).strip() or None
