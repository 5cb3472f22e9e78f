"""Word error rate: how the demo, the tests and the bench score recognized speech. Pure."""

from __future__ import annotations

import re

_WORD = re.compile(r"[a-z0-9']+")


def words(text: str) -> list[str]:
    """Lower-case words without punctuation."""
    return _WORD.findall(text.lower())


def word_error_rate(reference: str, hypothesis: str) -> float:
    """(substitutions + deletions + insertions) / words in ``reference`` (Levenshtein on words)."""
    ref, hyp = words(reference), words(hypothesis)
    if not ref:
        raise ValueError("word_error_rate.reference: must contain at least one word")
    previous = list(range(len(hyp) + 1))
    for i, expected in enumerate(ref, 1):
        current = [i]
        for j, heard in enumerate(hyp, 1):
            substitution = previous[j - 1] + (expected != heard)
            current.append(min(previous[j] + 1, current[j - 1] + 1, substitution))
        previous = current
    return previous[-1] / len(ref)
