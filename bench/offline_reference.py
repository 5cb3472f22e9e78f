"""The built-in model's turn path without its caches, and turn-suite-like requests for it.

``reference_respond`` and ``reference_usage`` are ``OfflineLLM.respond`` and its usage
count as they were before the per-line caches of ``xrmq.actors.models.extractive`` and
the list-free chunk count of ``chunking``: every line re-parsed, every message split into
chunks. They are the baseline of the models bench's CPU-per-turn figure and the
reference the property tests in ``tests/test_models_offline_caches.py`` hold the cached
path to. They reuse the model's per-line rules (``_fact_clause``, ``_match_words``, the
tag and label patterns), which the caches wrap but do not change.

``turn_requests`` builds what the turn suite sends the model: the conversation's system
prompt, a participant's context of dialogue and sensor notes (one message, ~6 KB, a
sliding window: each turn adds a question, its answer and a note and drops the oldest,
and the clock line changes) and a new question.
"""

from __future__ import annotations

from collections.abc import Sequence

from xrmq.actors.context.salience import _ALNUM, _LABEL, _TAG
from xrmq.actors.models import ChatMessage, ChatRequest, Usage
from xrmq.actors.models.chunking import word_chunks
from xrmq.actors.models.extractive import (
    _CLOCK_LINE,
    _GREETING,
    _LEADING_TAGS,
    _THANKS,
    _TIME_QUESTION,
    _WORD,
    GREETING_ANSWER,
    NO_MATCH_ANSWER,
    THANKS_ANSWER,
    _fact_clause,
    _match_words,
    _sentence,
    acknowledge,
    is_question,
)
from xrmq.actors.prompts.compaction import compaction_limit

SYSTEM_PROMPT = (
    "You are a helpful assistant holding a spoken conversation with a person. Answer from "
    "your own knowledge and from the context you are given: the earlier conversation, "
    "summaries of it, and background information that other agents supplied, each shown "
    "with the time it was recorded. When pieces of context disagree, prefer the most "
    "recent one, and say so when it matters. If neither your knowledge nor the context "
    "answers the question, say that briefly instead of guessing. Keep answers short and "
    "easy to follow by ear: plain sentences, no lists, markup or emoji.\n\nYou help operators."
)


def reference_content_lines(text: str) -> list[str]:
    lines = []
    for raw in text.splitlines():
        line = _TAG.sub("", raw).strip()
        if line and _ALNUM.search(line) and not _LABEL.match(line):
            lines.append(line)
    return lines


def reference_answer_from_context(question: str, context: Sequence[str]) -> str:
    if _TIME_QUESTION.search(question):
        clock = [line for line in context if _CLOCK_LINE.match(_LEADING_TAGS.sub("", line))]
        if clock:
            return f"It is {clock[-1].split(':', 1)[1].strip()}."
    wanted = _match_words(question)
    scored = []
    for index, line in enumerate(context):
        fact = _fact_clause(line)
        if fact is not None:
            shared = _match_words(fact[0]) & wanted
            if shared:
                scored.append((shared, index, fact[0]))
    if not scored:
        return NO_MATCH_ANSWER
    best = max(scored, key=lambda entry: (len(entry[0]), entry[1]))
    answer = _sentence(best[2])
    uncovered = wanted - best[0]
    extra = max(scored, key=lambda entry: (len(entry[0] & uncovered), entry[1]))
    if extra[0] & uncovered:
        answer += " " + _sentence(extra[2])
    return answer


def reference_reply(message: str, context: Sequence[str]) -> str:
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
            parts.append(reference_answer_from_context(rest, context))
        else:
            parts.append(acknowledge(rest))
    return " ".join(parts) or NO_MATCH_ANSWER


def reference_respond(request: ChatRequest) -> str:
    """``OfflineLLM.respond`` for a turn or a compaction request (no tool results)."""
    messages = request.messages
    has_system = messages[0].role == "system"
    if has_system and compaction_limit(messages[0].content) is not None:
        raise ValueError("reference_respond: a turn, not a compaction request")
    context = [
        line
        for message in messages[int(has_system) : -1]
        for line in reference_content_lines(message.content)
    ]
    return reference_reply(messages[-1].content, context)


def reference_usage(request: ChatRequest, output_tokens: int) -> Usage:
    input_tokens = sum(len(word_chunks(message.content)) for message in request.messages)
    return Usage(input_tokens=input_tokens, output_tokens=output_tokens)


_NO_MATCH = "Assistant: I have nothing about that in what I was given."
_LETTERS = "abcdefghijklmnopqrtuvwxyz"  # no "s": a final "s" folds (plurals)


def _question(number: int) -> str:
    """Like ``bench.turn_workers.question``: a word found nowhere in the context."""
    letters = ""
    while True:
        number, digit = divmod(number, len(_LETTERS))
        letters += _LETTERS[digit]
        if not number:
            return f"What about zq{letters}?"


def turn_requests(turns: int, *, first: int = 0, window: int = 30) -> list[ChatRequest]:
    """``turns`` consecutive turn-suite-like requests, numbered from ``first``.

    The context holds the last ``window`` exchanges (three lines each: the question, the
    answer, a sensor note) after a header, then the clock line. Apart from the header and
    the answer line, every line carries its turn's number: requests numbered more than
    ``window`` apart share no other line.
    """
    requests = []
    for turn in range(first, first + turns):
        lines = ["Earlier context in time order:", ""]
        for past in range(max(first, turn - window), turn):
            stamp = f"[2026-12-01 21:{past // 60 % 60:02d}:{past % 60:02d} UTC]"
            lines += [
                f"{stamp} User: {_question(past)}",
                _NO_MATCH,
                f"{stamp} [notes] note {past}: pump {past % 7} pressure {past % 97} kPa, "
                f"valve {past % 5} at {past % 100} percent open",
            ]
        lines.append(f"Current time: 2026-12-01 21:{turn // 60 % 60:02d}:{turn % 60:02d} UTC")
        requests.append(
            ChatRequest(
                (
                    ChatMessage("system", SYSTEM_PROMPT),
                    ChatMessage("user", "\n".join(lines)),
                    ChatMessage("user", _question(turn)),
                )
            )
        )
    return requests
