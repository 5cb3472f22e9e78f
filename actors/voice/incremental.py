"""Incremental recognition: commit the words two consecutive decodes agree on.

While a participant speaks, the voice input re-decodes the utterance so far every
``step_s`` of new speech. Whisper revises its last words as more audio arrives ("the
charging mess." becomes "the charging bay and..."), so a word is only *committed* once
two consecutive hypotheses agree on it (the local-agreement policy of whisper_streaming):
the longest common prefix of the previous and the new hypothesis, after the words already
committed, and not within ``SETTLE_S`` of the end of the audio decoded. At the end of
speech only the audio after the last committed word is left to decode, prompted with the
committed text, and the transcript is the committed words plus that tail.

``LocalAgreement`` is the pure core: fed hypotheses as ``Word`` lists (times in seconds
from the start of the utterance's audio), it says where the next decode starts
(``decode_from_s``) and what is committed. Bounded: the audio left to decode never
exceeds ``window_s`` (plus one step): when the uncommitted span grows past it (the
decodes keep disagreeing), the newest hypothesis's words before the window are committed
as they are, and with no words there (noise, silence) the window's start moves on anyway.
No I/O, no clock, no model: the tests drive it with tables of words.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

_NORMAL = re.compile(r"[^a-z0-9']+")
SETTLE_S = 0.5
"""A word ending this close to the end of the decoded audio is never committed: Whisper
revises the words at the edge of what it heard most."""
_OVERLAP = 5
"""The longest run of words a decode may repeat from the committed text at its start."""


@dataclass(frozen=True)
class Word:
    text: str
    start_s: float
    end_s: float


def _norm(text: str) -> str:
    return _NORMAL.sub("", text.lower())


class LocalAgreement:
    """One utterance's committed words (see the module docstring)."""

    def __init__(self, window_s: float = 8.0) -> None:
        if not window_s > 0:
            raise ValueError("LocalAgreement.window_s: must be > 0")
        self.window_s = window_s
        self.committed: list[Word] = []
        self._previous: list[Word] = []
        self._floor_s = 0.0

    @property
    def decode_from_s(self) -> float:
        """Where the next decode's audio starts: after the last committed word (or the
        window's start, when nothing could be committed for a whole window)."""
        end = self.committed[-1].end_s if self.committed else 0.0
        return max(end, self._floor_s)

    @property
    def text(self) -> str:
        return " ".join(word.text for word in self.committed)

    def update(self, hypothesis: list[Word], audio_s: float) -> list[Word]:
        """Take a decode of the audio from ``decode_from_s`` to ``audio_s`` (its words in
        utterance time); return the words it committed."""
        words = self.new_words(hypothesis)
        agreed = 0
        for old, new in zip(self._previous, words, strict=False):
            if _norm(old.text) != _norm(new.text) or new.end_s > audio_s - SETTLE_S:
                break
            agreed += 1
        committed = words[:agreed]
        rest = words[agreed:]
        window_start = audio_s - self.window_s
        while rest and rest[0].end_s <= window_start:
            committed.append(rest.pop(0))  # outside the window: taken as heard
        self.committed += committed
        self._previous = rest
        if self.decode_from_s < window_start:
            self._floor_s = window_start
        return committed

    def new_words(self, hypothesis: list[Word]) -> list[Word]:
        """``hypothesis`` without the words it repeats from the committed ones: words
        ending before the last committed one, and a leading run equal to the committed
        text's last words (the decode's audio starts at a word boundary Whisper's
        timestamps place only roughly)."""
        boundary = self.committed[-1].end_s if self.committed else 0.0
        words = [word for word in hypothesis if word.end_s > boundary and _norm(word.text)]
        return words[repeated(self.text, [word.text for word in words]) :]

    def finish(self, tail: str) -> str:
        """The utterance's transcript: the committed words and ``tail``, the decode of the
        audio after them (its leading repeat of the committed words dropped)."""
        tail_words = tail.split()
        tail_words = tail_words[repeated(self.text, tail_words) :]
        return " ".join([self.text, *tail_words]).strip()


def repeated(committed: str, words: list[str]) -> int:
    """How many of ``words``' leading words repeat ``committed``'s last words (the
    longest such run, at most ``_OVERLAP``)."""
    ending = [_norm(word) for word in committed.split()][-_OVERLAP:]
    leading = [_norm(word) for word in words[:_OVERLAP]]
    for size in range(min(len(ending), len(leading)), 0, -1):
        if ending[-size:] == leading[:size]:
            return size
    return 0
