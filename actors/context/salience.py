"""Salient values and the extractive summariser: pure text functions of the context core.

A summary that replaces entries must keep what they said: the numbers, identifiers, times
and proper names people will ask about. ``salient_values`` finds those values,
``summary_problem`` judges a model's summary against the entries it replaces and the
previous summary (``frozen``: the previous summary again while the entries added values;
``lossy``: too few of the entries' values kept), and ``extractive_summary`` is the
deterministic summariser that keeps the sentences carrying values: the built-in offline
model answers compaction requests with it, and the engine falls back to it when a model's
summaries keep failing. No model, clock or I/O here, so the engine may use it.
"""

from __future__ import annotations

import difflib
import math
import re
from typing import Literal, NamedTuple

SummaryProblem = Literal["frozen", "lossy"]
"""Why a model's summary was refused: the previous summary again, or values dropped."""

NEAR_IDENTICAL_RATIO = 0.9
"""A summary at least this similar to the previous one (``difflib`` ratio, after case and
whitespace folding) is "nearly identical": frozen unless it kept a value the entries added."""

MIN_KEPT_SHARE = 0.8
"""A summary must keep at least this share of the values that fit, the new entries' and the
previous summary's each (all of up to four): a rolling summary is rewritten again and
again, and what each rewrite may lose compounds."""

_TAG = re.compile(r"</?[A-Za-z][\w.:-]*>")
_ALNUM = re.compile(r"\w")
_LABEL = re.compile(r"^[\W_]*\w[\w ]{0,40}:\s*$")
_SENTENCE_BREAK = re.compile(r"(?<=[.!?])\s+")
_NUMBER = re.compile(r"\d")
_TIME = re.compile(r"\b\d{1,2}:\d{2}\b")
_IDENTIFIER = re.compile(r"\b(?=\w*[A-Za-z])(?=\w*\d)[\w-]+\b|\b\w+[_-]\w+\b")
_CAPITALIZED = re.compile(r"\b[A-Z][a-z]+")
_ELLIPSIS = "…"

STOPWORDS = frozenset(
    """a an the is are was were be been am do does did what which who whom whose where when
    why how i you me my your yours it its of in on at to for and or but with about that this
    these those there here tell know can could would should will please have has had any
    some from by as we our us they them their he she his her him if so not no yes just
    now then than into out up down over again more most all""".split()
)


def content_lines(text: str) -> list[str]:
    """The lines of ``text`` that carry content: markup tags removed, lines without any
    letter or digit (rules, delimiters) and short label lines ("Previous summary:")
    dropped."""
    return [line for raw in text.splitlines() if (line := content_line(raw)) is not None]


def content_line(raw: str) -> str | None:
    """One line of ``content_lines``: its content, or None for a line it drops."""
    line = _TAG.sub("", raw).strip()
    return line if line and _ALNUM.search(line) and not _LABEL.match(line) else None


_CORRECTION = re.compile(
    r"\b(actually|correction|corrected|instead|changed|now|no longer|updated|moved)\b", re.I
)


def _salience(sentence: str, values: frozenset[str]) -> int:
    """Each value a sentence carries (``values``) counts the same (a name as much as a
    four-digit number, so names are not the first to go), and a correction adds to it."""
    return 1 + 4 * len(values) + 3 * len(_CORRECTION.findall(sentence))


def _utf8_len(text: str) -> int:
    return len(text.encode("utf-8"))


def _shorten(text: str, limit_bytes: int) -> str:
    """``text`` cut at a word boundary with an ellipsis, at most ``limit_bytes`` bytes."""
    room = limit_bytes - _utf8_len(_ELLIPSIS)
    if room <= 0:
        return text.encode("utf-8")[:limit_bytes].decode("utf-8", "ignore")
    head = text.encode("utf-8")[:room].decode("utf-8", "ignore")
    if " " in head and not text.encode("utf-8")[room : room + 1].isspace():
        head = head.rsplit(" ", 1)[0]
    return head.rstrip() + _ELLIPSIS


def extractive_summary(material: str, limit_bytes: int) -> str:
    """Keep the most informative sentences of ``material`` within ``limit_bytes``.

    ``material`` is the previous summary followed by the new entries; its sentences are
    scored together, so the result merges both. Sentences with numbers, times, names,
    identifiers and corrections score highest (each value alike), and of equals the newest;
    what rendering added (speaker labels, time and source tags) scores nothing, and a kept
    sentence loses its leading time and source tags and ``User:`` label (the summary's own
    label says where it comes from; an assistant's sentence keeps its label). Exact repeats
    count once, and so does a sentence that restates another (the same values, mostly the
    same words): of those, what a participant said is kept over the assistant's echo of
    it, else the first; and a sentence that a later one updates (the same subject with
    other values: a reading, a room that moved) gives way to it; so a small budget holds
    more distinct, current facts. Chosen sentences keep their original order, one per
    line. If not even the best sentence fits, it is shortened at a word boundary. The
    result never exceeds ``limit_bytes`` UTF-8 bytes.
    """
    return _extract(_Material.read(material), limit_bytes)


class _Material(NamedTuple):
    """A material's sentences as the extractive summariser weighs them."""

    shown: list[str]
    """Each sentence as a summary shows it (without its time and source tags)."""
    unlabelled: list[str]
    """Each sentence without its speaker labels."""
    values: list[frozenset[str]]
    """Each sentence's salient values."""
    candidates: list[int]
    """The sentences worth keeping: no restatement of another, none a later one updates."""

    @classmethod
    def read(cls, material: str) -> _Material:
        sentences: list[str] = []
        shown: list[str] = []
        for line in content_lines(material):
            for sentence in (c for s in _SENTENCE_BREAK.split(line) for c in _clauses(s)):
                text = _RENDERED_PREFIX.sub("", sentence).strip()
                if text and _ALNUM.search(text) and text not in shown:
                    sentences.append(sentence)
                    shown.append(text)
        unlabelled = [_SPEAKER.sub(" ", sentence) for sentence in sentences]
        values = [salient_values(text) for text in unlabelled]  # once per sentence
        candidates = _latest_values(
            _first_statements(sentences, unlabelled, values), unlabelled, values
        )
        return cls(shown, unlabelled, values, candidates)

    def stale_values(self) -> frozenset[str]:
        """The values only sentences that a later one updates carry: superseded readings."""
        current = frozenset().union(*(self.values[i] for i in self.candidates))
        return frozenset().union(*self.values) - current


def _extract(read: _Material, limit_bytes: int) -> str:
    shown, unlabelled, values, candidates = read
    if not shown or limit_bytes <= 0:
        return ""
    ranked = sorted(candidates, key=lambda i: (-_salience(unlabelled[i], values[i]), -i))
    chosen: list[int] = []
    used = -1  # the first sentence needs no separator
    for index in ranked:
        cost = _utf8_len(shown[index]) + 1
        if used + cost <= limit_bytes:
            chosen.append(index)
            used += cost
    if not chosen:
        return _shorten(shown[ranked[0]], limit_bytes)
    return "\n".join(shown[i] for i in sorted(chosen))


_CLAUSE_BREAK = re.compile(r"(?:,|;)\s+")
LONG_SENTENCE_BYTES = 120
"""A sentence longer than this with several values is a list (a model's summary joins its
facts with commas): its clauses are weighed one by one."""


def _clauses(sentence: str) -> list[str]:
    """``sentence``'s facts: a long sentence with several values split at its commas and
    semicolons, a clause with no word of its own (``58.3 C``, ``and 26.6 C``) staying with
    the one before it, so "aquarium readings 73.9 C, 58.3 C, server rack b read -5.2 C"
    is two facts, each updated by a later reading of its own thing."""
    if _utf8_len(sentence) <= LONG_SENTENCE_BYTES or len(salient_values(sentence)) < 2:
        return [sentence]
    clauses: list[str] = []
    for part in _CLAUSE_BREAK.split(sentence):
        own = [word for word in _content_words(part) if len(word) > 2 and not word.isdigit()]
        if clauses and not own:
            clauses[-1] = f"{clauses[-1]}, {part}"
        else:
            clauses.append(part)
    return [clause.strip() for clause in clauses if clause.strip()]


_RENDERED_PREFIX = re.compile(r"^(?:\[[^\]]*\]\s*)*(?:User:\s*)?")
"""What rendering puts before an entry's text: its time and source tags, the speaker."""


RESTATED_SHARE = 0.6
"""Of two sentences carrying the same values, the share of their content words in common
from which one restates the other (an answer echoing the fact it confirms)."""
_SPEAKER = re.compile(r"\b(?:User|Assistant|Summary of earlier|Current state):")
"""The speaker labels rendering puts before an entry's text: no value, no name."""


class _Fact(NamedTuple):
    values: frozenset[str]
    words: frozenset[str]

    def restates(self, kept: _Fact) -> bool:
        """The same values (at least one) and mostly the same content words."""
        if not self.values or self.values != kept.values:
            return False
        shared = len(self.words & kept.words)
        return shared >= RESTATED_SHARE * max(1, min(len(self.words), len(kept.words)))


def _first_statements(
    sentences: list[str], unlabelled: list[str], values: list[frozenset[str]]
) -> list[int]:
    """The sentences that restate no other, by index: of a fact said several times, what
    a participant said is kept over the assistant's echo of it ("Noted: your badge is
    4417."), else its first statement."""
    kept: dict[frozenset[str], list[int]] = {}
    facts = [_Fact(found, _content_words(text)) for found, text in zip(values, unlabelled)]
    echo = [sentence.startswith("Assistant:") for sentence in sentences]
    for index, fact in enumerate(facts):
        group = kept.setdefault(fact.values, [])
        restated = next((other for other in group if fact.restates(facts[other])), None)
        if restated is None:
            group.append(index)
        elif echo[restated] and not echo[index]:
            group[group.index(restated)] = index
    return sorted(index for group in kept.values() for index in group)


SUPERSEDED_SHARE = 0.6
"""Of two sentences about one thing, the share of their subject words (content words that
are not readings) in common, of the larger set, from which the later one updates the
earlier."""


class _Reading(NamedTuple):
    sentence: int
    readings: frozenset[str]
    names: frozenset[str]
    shapes: frozenset[str]
    subject: frozenset[str]


def _reading(index: int, found: frozenset[str], text: str) -> _Reading | None:
    """What a sentence says about what: its readings (the values that change: numbers,
    times; its one value, whatever it is) and the identifiers that name the thing they are
    about (the ``S1`` of "Sensor S1 read 101 kPa"), or None if it has no reading. Proper
    names stay subject words ("Aquarium" opening a summary's list item)."""
    if len(found) == 1:
        readings, names = found, frozenset[str]()
    else:
        names = frozenset(
            value for value in found if re.search(r"\d", value) and re.search(r"[^\W\d_]", value)
        )
        readings = frozenset(value for value in found if not re.search(r"[^\W\d_]", value))
    if not readings:
        return None
    value_words = {word for value in readings for word in re.findall(r"\w+", value)}
    words = _content_words(_BOOKKEEPING.sub(" ", text))
    subject = frozenset(word for word in words if word not in value_words)
    return _Reading(index, readings, names, frozenset(map(_shape, readings)), subject)


def _shape(value: str) -> str:
    if ":" in value:
        return "time"
    if re.fullmatch(r"\d+(?:[.,]\d+)+", value):
        return "decimal"
    return "number" if value.isdigit() else "code"


def _latest_values(
    candidates: list[int], unlabelled: list[str], values: list[frozenset[str]]
) -> list[int]:
    """``candidates`` without the sentences a later candidate updates: the same subject
    (``SUPERSEDED_SHARE`` of its words, and the same names) with other readings of the
    kinds it has: "Aquarium reads 88.0 C" updates "Aquarium readings 23.2 C and 81.9 C",
    "Sensor S2 read 102 kPa" does not update "Sensor S1 read 101 kPa" (another name), and
    "Meeting moved to room 539" does not update "Meeting in room 12 at 09:00" (its time
    would go with it)."""
    facts = [
        fact
        for index in candidates
        if (fact := _reading(index, values[index], unlabelled[index])) is not None
    ]
    superseded: set[int] = set()
    for position, fact in enumerate(facts):
        for later in facts[position + 1 :]:
            shared = len(fact.subject & later.subject)
            if (
                fact.subject
                and fact.names == later.names
                and fact.readings != later.readings
                and fact.shapes <= later.shapes
                and shared >= SUPERSEDED_SHARE * max(len(fact.subject), len(later.subject))
            ):
                superseded.add(fact.sentence)
                break
    return [index for index in candidates if index not in superseded]


def _content_words(text: str) -> frozenset[str]:
    return frozenset(word for word in re.findall(r"\w+", text.lower()) if word not in STOPWORDS)


_BOOKKEEPING = re.compile(
    r"\[[^\]]*\]|\b\d{4}-\d{2}-\d{2}\b|\b\d{1,2}:\d{2}:\d{2}\b|\bUTC\b"
    r"|\b(?:User|Assistant|Summary of earlier|Current state):"
)
"""What rendering adds to an entry (its time and source tags, the speaker labels): when
and where something was recorded, not a value it carries."""
_VALUE = re.compile(r"\d{1,2}:\d{2}\b|\d+(?:[.,]\d+)+|\b(?=[\w-]*\d)[\w-]*\w|\d+")
_NAME = re.compile(r"(?<![.!?:]\s)(?<!^)\b[A-Z][a-z]+(?:\s[A-Z][a-z]+)*")
_LABEL_OR_PADDING = re.compile(r"(?:([a-z])\1*)(?:[\d_-]+(?:([a-z])\2*)?)*")
"""A lower-case token opening with a letter whose every letter run is one letter repeated:
a sequence label or padding (``q7``, ``v2``, ``a0-aaaa``), not a value anyone quotes. Codes
people quote carry capitals or real words (``WO-4471``, ``B12``, ``ext-4471``); numbers with
a unit after them (``5m``, ``10am``) open with the digit and stay values."""


def salient_values(text: str) -> frozenset[str]:
    """The values ``text`` carries, lower-cased: times, numbers, identifiers with digits, and
    proper names (capitalized words not starting a sentence, stop words excluded). Dates,
    clock stamps, time and source tags and speaker labels are bookkeeping, and sequence labels
    and padding (``_LABEL_OR_PADDING``) are placeholders: neither is counted."""
    found: set[str] = set()
    for raw in text.splitlines():
        line = _BOOKKEEPING.sub(" ", _TAG.sub(" ", raw)).strip()
        found.update(
            match.group(0).lower()
            for match in _VALUE.finditer(line)
            if not _LABEL_OR_PADDING.fullmatch(match.group(0))
        )
        for match in _NAME.finditer(line):
            words = [w for w in match.group(0).split() if w.lower() not in STOPWORDS]
            if words:
                found.add(" ".join(words).lower())
    return frozenset(found)


def _folded(text: str) -> str:
    return " ".join(text.lower().split())


def summary_problem(
    summary: str,
    previous: str,
    entries: list[str] | tuple[str, ...],
    limit_bytes: int,
) -> SummaryProblem | None:
    """Why ``summary`` must not replace ``entries`` (after ``previous``), or None if it may.

    The yardstick is what fits: the extractive summary of the same material (the previous
    summary and the entries) within the same ``limit_bytes`` (the fallback's). A value is
    kept when it occurs in the text (case and whitespace folded).

    ``frozen``: ``summary`` is the previous summary (nearly: ``NEAR_IDENTICAL_RATIO``)
    without any value the entries added, where the yardstick keeps some. ``lossy``: of
    either kind of value, it keeps fewer than the yardstick does, less what may go
    (``MIN_KEPT_SHARE`` of them): the entries' new values, of which none of up to four may
    go; and the previous summary's, of which one may also go while the entries add values
    (a correction replaces it: "room 12" -> "room 539"). An old value may go only for a
    new value of its kind that the summary keeps (``value_kind``: a correction replaces a
    value with one of its kind), so a booking reference is not dropped to make room for
    a room number. A kept value that only a superseded sentence carries (a reading a
    later one updates) counts for nothing: a stale reading does not make up for the
    current one dropped. A rolling summary that keeps the new values and drops the old
    loses them for good; one that keeps the old and drops the newest reading answers with
    a stale one. A material without values never makes a summary fail, nor does one whose
    values do not fit the limit at all.
    """
    old = salient_values(previous)
    new = salient_values("\n".join(entries)) - old
    if not old and not new:
        return None
    material = _Material.read("\n".join([previous, *entries]))
    yardstick = _folded(_extract(material, limit_bytes))
    stale = material.stale_values()
    text, before = _folded(summary), _folded(previous)
    new, old = new - stale, old - stale
    fits_new = {value for value in new if value in yardstick}
    fits_old = {value for value in old if value in yardstick}
    kept_new = sum(value in text for value in new)
    kept_old = sum(value in text for value in old)
    if (
        before
        and fits_new
        and not kept_new
        and difflib.SequenceMatcher(None, text, before, autojunk=False).ratio()
        >= NEAR_IDENTICAL_RATIO
    ):
        return "frozen"
    may_go_old = _may_go(len(fits_old)) + (1 if fits_new and fits_old else 0)
    replacing = {value_kind(value) for value in new if value in text}
    dropped_old = [value for value in fits_old if value not in text]
    if (
        kept_new < len(fits_new) - _may_go(len(fits_new))
        or kept_old < len(fits_old) - may_go_old
        or (
            kept_old < len(fits_old)  # the allowance is used: only for a correction
            and any(value_kind(value) not in replacing for value in dropped_old)
        )
    ):
        return "lossy"
    return None


def value_kind(value: str) -> str:
    """What kind of value ``value`` (one of ``salient_values``) is: ``name`` (no digit),
    ``time``, ``decimal``, ``number`` or ``code`` (letters and digits: an identifier)."""
    return _shape(value) if _NUMBER.search(value) else "name"


def _may_go(fits: int) -> int:
    """Of ``fits`` values, how many a summary may drop: ``1 - MIN_KEPT_SHARE`` of them."""
    return math.floor(fits * (1 - MIN_KEPT_SHARE) + 1e-9)
