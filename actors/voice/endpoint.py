"""Whether the words so far end a turn: a pure rule on the recognizer's text.

The voice input ends a turn after ``trailing_silence_s`` of silence. When the words heard
up to a shorter pause already end a sentence or a question, waiting longer only delays
the answer, so the turn ends at the pause; otherwise it waits the whole hangover, so a
pause inside a sentence ("Where did I leave the ... spare key?") does not cut the
speaker off. Whisper punctuates what it hears, fragments included ("Where did I leave
the."), so punctuation alone is not enough: a text ends a turn when it ends with ``.``,
``?`` or ``!`` and its last word is not one that leaves a sentence open (an article, a
preposition, a conjunction, a possessive: ``the``, ``of``, ``and``, ``my``...), and it has
at least ``MIN_WORDS`` words (a lone "So." or "Well." is a speaker gathering thoughts).

The recognizer is prompted with the participant's context, and on the first half of a
sentence it can complete it from the prompt ("The fire drill starts at" heard as "The
fire drill starts at half past two."). Such a text has more words than the speech had
time for, so ``ends_turn`` also requires at most ``MAX_WORDS_PER_S`` words per second of
speech: what was guessed, not heard, does not end anyone's turn.
"""

from __future__ import annotations

import re

MIN_WORDS = 2
MAX_WORDS_PER_S = 5.0
"""Faster than people speak: a quick question of short words reaches 4.5 words a second
("Where did I leave the spare key?" in 1.5 s), a sentence completed from the prompt 6
("The fire drill starts at" in 1.4 s, heard as eight words). A thin margin: the rule
keeps a guessed completion from ending a turn in the common case, not in every case."""
_WORD = re.compile(r"[a-z0-9']+")
_OPEN_ENDINGS = frozenset(
    """a an the this that these those my your his her its our their some any no every
    of to in on at by for with from into onto about over under between through after
    before during without within and or but so because if when while than then as
    is are was were be been am do does did have has had will would can could should
    shall may might must not very just um uh er like which who whose where what""".split()
)
"""Last words that leave a sentence open."""


def ends_sentence(text: str) -> bool:
    """Whether ``text`` (what was heard up to a pause) ends a sentence or a question."""
    stripped = text.strip().rstrip("\"')]")
    if not stripped.endswith((".", "?", "!")) or stripped.endswith("..."):
        return False
    words = _WORD.findall(stripped.lower())
    return len(words) >= MIN_WORDS and words[-1] not in _OPEN_ENDINGS


def ends_turn(text: str, speech_s: float) -> bool:
    """Whether ``text``, heard in ``speech_s`` seconds of speech up to a pause, ends the
    speaker's turn: it ends a sentence and has no more words than the speech could hold."""
    return ends_sentence(text) and len(_WORD.findall(text.lower())) <= MAX_WORDS_PER_S * max(
        speech_s, 0.0
    )
