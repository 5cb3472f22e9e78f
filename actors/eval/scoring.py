"""The exact-value scorer: pure functions over an answer (or a context) and a fact.

A fact is recalled when its current value appears in the text as a whole token (``12``
does not match ``120``, ``4471`` does not match ``AB-4471-K3``; case and runs of
white space are ignored). A superseded value in the text counts against: the answer
is a stale-conflict error and scores 0, unless the sentence that states it marks it as
no longer true ("previously", "moved from", "no longer", ...), so an answer that says
what a correction superseded, as the default compaction prompts ask, is not punished.
"""

from __future__ import annotations

import re
from collections.abc import Iterable

import msgspec

from .eval_session import Fact

_SPACE = re.compile(r"\s+")
_SENTENCE = re.compile(r"(?<=[.!?;])\s+|\n+")
SUPERSEDED_MARKERS = re.compile(
    r"\b(previously|formerly|originally|no longer|superseded|replac(?:ed|es|ing)|instead of|"
    r"moved from|changed from|used to)\b",
    re.I,
)
"""Words that mark a stated value as one that no longer holds."""


def normalize(text: str) -> str:
    """Casefolded, with every run of white space a single space."""
    return _SPACE.sub(" ", text.casefold()).strip()


def _pattern(value: str) -> re.Pattern[str]:
    return re.compile(r"(?<![\w.:-])" + re.escape(normalize(value)) + r"(?![\w]|\.\d|:\d)")


def mentions(text: str, value: str) -> bool:
    """``value`` occurs in ``text`` as a whole token (see the module docstring)."""
    return _pattern(value).search(normalize(text)) is not None


def states_as_current(text: str, value: str) -> bool:
    """``value`` occurs in a sentence of ``text`` that does not mark it as superseded."""
    pattern = _pattern(value)
    for sentence in _SENTENCE.split(normalize(text)):
        if pattern.search(sentence) and not SUPERSEDED_MARKERS.search(sentence):
            return True
    return False


class Score(msgspec.Struct, frozen=True):
    """How one text answers one fact."""

    recalled: bool
    """The current value appears."""
    stale: bool
    """A superseded value is stated as current."""

    @property
    def correct(self) -> bool:
        """Recalled and not contradicted by a stale value: the figure recall counts."""
        return self.recalled and not self.stale


def score(text: str, fact: Fact) -> Score:
    """Score ``text`` (an answer to the fact's probe, or a rendered context) for ``fact``."""
    recalled = mentions(text, fact.value)
    stale = any(states_as_current(text, old) for old in fact.superseded)
    return Score(recalled, stale)


def recall(scores: Iterable[Score]) -> float | None:
    """Share of correct scores; ``None`` for none."""
    items = list(scores)
    if not items:
        return None
    return sum(s.correct for s in items) / len(items)
