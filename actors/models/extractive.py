"""The built-in model's thinking, as pure functions: extractive answers and summaries.

No generation, only selection: a question is answered with the context facts that share
the most words with it (what the user said turned to the second person), a statement is
acknowledged, a greeting greeted; a summary keeps the sentences that carry names, numbers,
times, identifiers and corrections, within a byte limit. Both are deterministic, so a
demo or a test shows exactly which input the output came from.

The summariser and ``content_lines`` live in the pure ``context.salience`` (the context
engine falls back to the same summariser); they are re-exported here.

Per-line work is memoized (``LINE_CACHE_SIZE``): consecutive turns of one participant
send mostly the same context lines, so each line is cleaned and analysed once, not once
per turn; the caches are LRUs of fixed size and change no result.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from functools import lru_cache
from typing import NamedTuple

from xrmq.actors.context.salience import STOPWORDS as _STOPWORDS
from xrmq.actors.context.salience import content_line
from xrmq.actors.context.salience import extractive_summary as extractive_summary

NO_MATCH_ANSWER = "I have nothing about that in what I was given."

_WORD = re.compile(r"[a-z0-9]+")


LINE_CACHE_SIZE = 4096
"""Distinct lines each per-line cache remembers, least recently used dropped first.

A turn's prompt repeats the previous turn's context lines (plus a few new ones and a new
clock line), and cleaning and analysing ~100 lines with a dozen regular expressions each
cost the built-in model ~1 ms of CPU per turn on the path to its first chunk. 4096 lines
cover the contexts of dozens of participants at once; the bound keeps the memory fixed
(a few MB at most)."""


def keywords(text: str) -> set[str]:
    """Content words of ``text``: lower-cased, stop words dropped, plural ``s`` folded."""
    found = set()
    for word in _WORD.findall(text.lower()):
        if word in _STOPWORDS:
            continue
        if len(word) > 3 and word.endswith("s") and not word.endswith("ss"):
            word = word[:-1]
        found.add(word)
    return found


_LEADING_TAGS = re.compile(r"^(?:\[[^\]]*\]\s*|Summary of earlier [^:]*:\s*|Current state:\s*)+")
"""Rendered context lines start with their time, source and kind ("[14:03 UTC] [notes] ...",
"Summary of earlier conversation: ...", "Current state: ..."): bookkeeping for the
prompt, not words to say aloud."""


_ASSISTANT_LINE = re.compile(r"^Assistant:\s")
_USER_LABEL = re.compile(r"^User:\s*")
_CLOCK_LINE = re.compile(r"^Current time:", re.I)
_DATE = re.compile(r"\b\d{4}-\d{2}-\d{2}\b|\b\d{1,2}:\d{2}:\d{2}\b|\bUTC\b")
"""Dates and clock stamps: their numbers are when something was said, never what it said."""

GREETING_ANSWER = "Hello! What can I do for you?"
THANKS_ANSWER = "You're welcome."
_GREETING = re.compile(
    r"^(?:hello|hi|hey|hiya|howdy|greetings|good (?:morning|afternoon|evening))\b[\s,!.]*", re.I
)
_THANKS = re.compile(r"^(?:thanks|thank you|cheers|many thanks)\b[\w\s,]*[.!]*$", re.I)
_QUESTION_START = re.compile(
    r"^(?:what|where|when|who|whom|whose|which|why|how|is|are|was|were|am|do|does|did|can|"
    r"could|will|"
    r"would|should|shall|may|have|has|had|tell me|remind me|show me|list|describe|explain)\b",
    re.I,
)
_TIME_QUESTION = re.compile(
    r"^\s*(?:(?:and|so|ok|okay|please|sorry)[\s,]+)*(?:"
    r"what(?:'s| is)? the (?:current )?(?:time|date|day)(?: (?:now|today|right now))?"
    r"|what (?:time|date|day) is it(?: (?:now|today|right now))?"
    r"|what(?:'s| is)? today's date|(?:tell me )?the (?:current )?(?:time|date)"
    r")[\s?.!]*$",
    re.I,
)
"""A question about now (the clock line answers it), not the time of something:
"What time is it?" is, "What time is my yoga class?" is a question for the context."""
_DISCOURSE = re.compile(
    r"^(?:(?:actually|so|well|oh|ok|okay|also|btw|by the way|fyi|just so you know|"
    r"note that|please note that|remember that|please remember that)\b[\s,:]*)+",
    re.I,
)
_REQUEST_TAIL = re.compile(
    r"[,;]?\s*(?:(?:and|so)\s+)?(?:please\b.*|(?:can|could) you\b.*|"
    r"(?:remember|note) (?:it|that|this)\b.*|ok\??|okay\??)$",
    re.I,
)
_FIRST_PERSON = {
    "i": "you",
    "me": "you",
    "my": "your",
    "mine": "yours",
    "myself": "yourself",
    "i'm": "you're",
    "i've": "you've",
    "i'll": "you'll",
    "i'd": "you'd",
    "am": "are",
}
_PRONOUN_WORD = re.compile(
    r"\b(?:i'm|i've|i'll|i'd|i|me|my|mine|myself)\b|(?<=\bI )am\b|(?<=\bI )was\b", re.I
)
_LOWER_FIRST = frozenset(
    "you your yours the a an this that these those it its there we our".split()
)


def is_question(text: str) -> bool:
    """Whether the user's ``text`` asks something (a question mark, or a question or
    request word first) rather than stating it."""
    text = text.strip()
    return text.endswith("?") or bool(_QUESTION_START.match(_DISCOURSE.sub("", text)))


def second_person(text: str) -> str:
    """The user's first-person words turned to the second person: "I left my key" ->
    "you left your key" ("I am"/"I was" -> "you are"/"you were"). A look-alike that
    matches only case-insensitively ("İ", "ı", "myſelf") stays as written."""

    def swap(match: re.Match[str]) -> str:
        word = match.group(0)
        lower = word.lower()
        if lower == "was":
            return "were"
        return _FIRST_PERSON.get(lower, word)

    return _PRONOUN_WORD.sub(swap, text)


def _statement(text: str) -> str:
    """A stated fact without its greeting, discourse markers ("Actually, ...") and request
    tails (", please remember it"), ending without punctuation."""
    text = _DISCOURSE.sub("", _GREETING.sub("", text.strip()))
    text = _REQUEST_TAIL.sub("", text).strip()
    return text.rstrip(" .!?;:,")


def _sentence(text: str) -> str:
    return text[:1].upper() + text[1:] + "." if text else ""


def _fact_clause(line: str) -> tuple[str, bool] | None:
    """The sayable clause of a context line and whether the user said it, or None for a
    line that is no fact: the clock line, the model's own answers, the user's questions."""
    bare = _LEADING_TAGS.sub("", line)
    if _CLOCK_LINE.match(bare) or _ASSISTANT_LINE.match(bare):
        return None
    said_by_user = bool(_USER_LABEL.match(bare))
    clause = _LEADING_TAGS.sub("", _USER_LABEL.sub("", bare))
    if said_by_user and is_question(clause):
        return None
    clause = _statement(clause) if said_by_user else clause.rstrip(" .!?;:,")
    if not clause:
        return None
    first_person = bool(re.match(r"(?i)(?:i|my|i'm|i've)\b", clause))
    return (second_person(clause) if said_by_user or first_person else clause), said_by_user


def _match_words(text: str) -> set[str]:
    return keywords(_DATE.sub(" ", text))


class _LineFact(NamedTuple):
    """What ``answer_from_context`` needs of a context line."""

    clock: bool
    """Whether it is the clock line ("Current time: ...")."""
    clause: str | None
    """Its sayable clause (``_fact_clause``), None for a line that is no fact."""
    words: frozenset[str]
    """The clause's match words (empty for no fact)."""


_content_line = lru_cache(maxsize=LINE_CACHE_SIZE)(content_line)
"""``content_line``, memoized: a turn's context repeats the previous turn's lines."""


def content_lines(text: str) -> list[str]:
    """The lines of ``text`` that carry content: markup tags removed, lines without any
    letter or digit (rules, delimiters) and short label lines ("Previous summary:")
    dropped."""
    return [line for raw in text.splitlines() if (line := _content_line(raw)) is not None]


@lru_cache(maxsize=LINE_CACHE_SIZE)
def _line_fact(line: str) -> _LineFact:
    clock = bool(_CLOCK_LINE.match(_LEADING_TAGS.sub("", line)))
    fact = _fact_clause(line)
    if fact is None:
        return _LineFact(clock, None, frozenset())
    return _LineFact(clock, fact[0], frozenset(_match_words(fact[0])))


def answer_from_context(question: str, context: Sequence[str]) -> str:
    """Answer ``question`` by saying the context facts that best match its words.

    A fact is a context line without its time and source tags; the clock line, the
    model's own earlier answers ("Assistant: ...") and the user's earlier questions are
    not facts, and the numbers of dates and clock stamps never match. What the user said
    is said back in the second person ("You left the key in drawer 12."). The best fact
    shares the most content words with the question (a later line wins a tie: context
    is in time order, so it is the newer fact); a second is added when it covers
    question words the first does not. With no shared word the answer says so plainly.
    A question about the time or date is answered from the clock line.
    """
    facts = [_line_fact(line) for line in context]
    if _TIME_QUESTION.search(question):
        clock = [line for line, fact in zip(context, facts, strict=True) if fact.clock]
        if clock:
            return f"It is {clock[-1].split(':', 1)[1].strip()}."
    wanted = _match_words(question)
    scored = []
    for index, (_, clause, words) in enumerate(facts):
        if clause is not None:
            shared = words & wanted
            if shared:
                scored.append((shared, index, clause))
    if not scored:
        return NO_MATCH_ANSWER
    best = max(scored, key=lambda entry: (len(entry[0]), entry[1]))
    answer = _sentence(best[2])
    uncovered = wanted - best[0]
    extra = max(scored, key=lambda entry: (len(entry[0] & uncovered), entry[1]))
    if extra[0] & uncovered:
        answer += " " + _sentence(extra[2])
    return answer


def acknowledge(statement: str) -> str:
    """ "Noted: <the statement in the second person>." for something the user told it."""
    clause = second_person(_statement(statement))
    if not clause:
        return "Noted."
    first, _, rest = clause.partition(" ")
    if first.lower() in _LOWER_FIRST:
        clause = first.lower() + (" " + rest if rest else "")
    return f"Noted: {clause}."


def reply(message: str, context: Sequence[str]) -> str:
    """The built-in model's reply to the user's ``message`` with ``context`` lines.

    A greeting is greeted ("Hello! ..."), thanks are acknowledged, a question is answered
    from the context (``answer_from_context``) and a statement is acknowledged
    (``acknowledge``); a greeting followed by more gets both.
    """
    text = message.strip()
    greeting = _GREETING.match(text)
    rest = text[greeting.end() :].strip() if greeting else text
    parts = []
    if greeting:
        parts.append("Hello!" if _WORD.search(rest.lower()) else GREETING_ANSWER)
    if _WORD.search(rest.lower()):
        if _THANKS.match(rest):
            parts.append(THANKS_ANSWER)
        elif is_question(rest):
            parts.append(answer_from_context(rest, context))
        else:
            parts.append(acknowledge(rest))
    return " ".join(parts) or NO_MATCH_ANSWER
