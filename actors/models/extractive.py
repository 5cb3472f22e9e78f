"""The embedded model's thinking, as pure functions: extractive answers and summaries.

No generation, only selection: an answer quotes the context lines that share the most
words with the question, and a summary keeps the sentences that carry names, numbers,
times, identifiers and corrections, within a byte limit. Both are deterministic, so a
demo or a test shows exactly which input the output came from.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

NO_MATCH_ANSWER = "I have nothing about that in what I was given."

_STOPWORDS = frozenset(
    """a an the is are was were be been am do does did what which who whom whose where when
    why how i you me my your yours it its of in on at to for and or but with about that this
    these those there here tell know can could would should will please have has had any
    some from by as we our us they them their he she his her him if so not no yes just
    now then than into out up down over again more most all""".split()
)
_WORD = re.compile(r"[a-z0-9]+")
_TAG = re.compile(r"</?[A-Za-z][\w.:-]*>")
_ALNUM = re.compile(r"\w")
_LABEL = re.compile(r"^[\W_]*\w[\w ]{0,40}:\s*$")
_SENTENCE_BREAK = re.compile(r"(?<=[.!?])\s+")
_NUMBER = re.compile(r"\d")
_TIME = re.compile(r"\b\d{1,2}:\d{2}\b")
_IDENTIFIER = re.compile(r"\b(?=\w*[A-Za-z])(?=\w*\d)[\w-]+\b|\b\w+[_-]\w+\b")
_CAPITALIZED = re.compile(r"\b[A-Z][a-z]+")
_CORRECTION = re.compile(r"\b(actually|correction|corrected|instead|changed|now|no longer|updated)\b", re.I)
_ELLIPSIS = "…"


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


def content_lines(text: str) -> list[str]:
    """The lines of ``text`` that carry content: markup tags removed, lines without any
    letter or digit (rules, delimiters) and short label lines ("Previous summary:")
    dropped."""
    lines = []
    for raw in text.splitlines():
        line = _TAG.sub("", raw).strip()
        if line and _ALNUM.search(line) and not _LABEL.match(line):
            lines.append(line)
    return lines


_LEADING_TAGS = re.compile(r"^(?:\[[^\]]*\]\s*|Summary of earlier [^:]*:\s*|Current state:\s*)+")
"""Rendered context lines start with their time, source and kind ("[14:03 UTC] [notes] ...",
"Summary of earlier conversation: ...", "Current state: ..."): bookkeeping for the
prompt, not words to say aloud."""


_ASSISTANT_LINE = re.compile(r"^Assistant:\s")
_USER_LABEL = re.compile(r"^User:\s*")


def _as_clause(line: str) -> str:
    return _LEADING_TAGS.sub("", _USER_LABEL.sub("", _LEADING_TAGS.sub("", line))).rstrip(" .!?;:,")


def answer_from_context(question: str, context: Sequence[str]) -> str:
    """Answer ``question`` by quoting the context lines that best match its words.

    The best line shares the most content words with the question (a later line wins a
    tie: context is in time order, so it is the newer fact); a second line is added when
    it covers question words the first does not. With no shared word the answer says so.
    Its own earlier answers ("Assistant: ..." lines) are not quoted again: they would
    only echo what it said before.
    """
    wanted = keywords(question)
    facts = [line for line in context if not _ASSISTANT_LINE.match(_LEADING_TAGS.sub("", line))]
    scored = [(keywords(line) & wanted, index, line) for index, line in enumerate(facts)]
    scored = [entry for entry in scored if entry[0]]
    if not scored:
        return NO_MATCH_ANSWER
    best = max(scored, key=lambda entry: (len(entry[0]), entry[1]))
    answer = f"From what I have: {_as_clause(best[2])}."
    uncovered = wanted - best[0]
    extra = max(scored, key=lambda entry: (len(entry[0] & uncovered), entry[1]))
    if extra[0] & uncovered:
        answer += f" Also: {_as_clause(extra[2])}."
    return answer


def _salience(sentence: str) -> int:
    return (
        1
        + 3 * len(_NUMBER.findall(sentence))
        + 2 * len(_TIME.findall(sentence))
        + 2 * len(_IDENTIFIER.findall(sentence))
        + 2 * sum(word.lower() not in _STOPWORDS for word in _CAPITALIZED.findall(sentence))
        + 3 * len(_CORRECTION.findall(sentence))
    )


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
    identifiers and corrections score highest; exact repeats count once. Chosen
    sentences keep their original order, one per line. If not even the best sentence
    fits, it is shortened at a word boundary. The result never exceeds ``limit_bytes``
    UTF-8 bytes.
    """
    sentences: list[str] = []
    for line in content_lines(material):
        for sentence in _SENTENCE_BREAK.split(line):
            if sentence and sentence not in sentences:
                sentences.append(sentence)
    if not sentences or limit_bytes <= 0:
        return ""
    ranked = sorted(range(len(sentences)), key=lambda i: (-_salience(sentences[i]), i))
    chosen: list[int] = []
    used = -1  # the first sentence needs no separator
    for index in ranked:
        cost = _utf8_len(sentences[index]) + 1
        if used + cost <= limit_bytes:
            chosen.append(index)
            used += cost
    if not chosen:
        return _shorten(sentences[ranked[0]], limit_bytes)
    return "\n".join(sentences[i] for i in sorted(chosen))
