"""OfflineLLM's per-line caches change no output and stay bounded.

The cached functions (``extractive.content_lines``, ``extractive.answer_from_context``,
``chunking.chunk_count``, and ``OfflineLLM.respond`` and its usage count built on them)
are held to the uncached reference in ``bench.offline_reference`` (the turn path as it
was before the caches), with the caches shrunk to a few lines so that generated inputs
both hit them (a line seen again) and evict from them (more distinct lines than the
bound).
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from functools import lru_cache
from typing import Any
from unittest import mock

from hypothesis import given, settings
from hypothesis import strategies as st

from xrmq.actors.models import (
    ChatMessage,
    ChatOptions,
    ChatRequest,
    OfflineLLM,
    chunking,
    extractive,
)
from xrmq.actors.models.chunking import chunk_count, word_chunks

from bench.offline_reference import (
    reference_answer_from_context,
    reference_content_lines,
    reference_reply,
    reference_respond,
    reference_usage,
    turn_requests,
)

SMALL = 8
"""The bound the caches are shrunk to in the property tests."""

_CACHES: list[tuple[Any, str]] = [
    (extractive, "_content_line"),
    (extractive, "_line_fact"),
    (chunking, "_word_count"),
]


@contextmanager
def small_caches() -> Iterator[dict[str, Any]]:
    """The model's caches replaced by fresh ones of ``SMALL`` lines, by name."""
    with ExitStack() as stack:
        caches = {}
        for module, name in _CACHES:
            cache = lru_cache(maxsize=SMALL)(getattr(module, name).__wrapped__)
            stack.enter_context(mock.patch.object(module, name, cache))
            caches[name] = cache
        yield caches


PREFIXES = [
    "",
    "[14:03 UTC] ",
    "[2026-12-01 21:47:19 UTC] ",
    "[09:00] [notes] ",
    "Summary of earlier conversation: ",
    "Current state: ",
    "<context>",
]
SPEAKERS = ["", "", "User: ", "Assistant: ", "Current time: "]
PHRASES = [
    "I left my key in drawer 12",
    "Alice booked room 4B for 15:30",
    "Actually, my badge number is 4471, please remember it",
    "my car is the blue one",
    "What is my badge number?",
    "Where is the spare key?",
    "pump 3 pressure 71 kPa, valve 2 at 40 percent open",
    "I'm at the dock with pallet AX-1193",
    "Hello there",
    "Thanks!",
    "Previous summary:",
    "---",
    "2026-12-01 21:47:19 UTC",
    "I have nothing about that in what I was given.",
]
VOCABULARY = ["key", "drawer", "badge", "room", "Alice", "pump", "valve", "pallet", "car", "zq"]

body = st.one_of(
    st.sampled_from(PHRASES),
    st.lists(st.sampled_from([*VOCABULARY, "I", "my", "is", "the", "12", "4B", "?", "."])).map(
        " ".join
    ),
    st.text(st.characters(blacklist_categories=("Cs", "Zl", "Zp", "Cc")), max_size=40),
)
line = st.builds(
    lambda prefix, speaker, text, end: prefix + speaker + text + end,
    st.sampled_from(PREFIXES),
    st.sampled_from(SPEAKERS),
    body,
    st.sampled_from(["", ".", "?", "</context>", "  "]),
)
question = st.one_of(
    st.sampled_from(
        [
            "What time is it?",
            "Hello! Where is my key?",
            "Thanks",
            "What about zqab?",
            "Actually, my car is red, please remember that",
            "hi",
        ]
    ),
    st.lists(st.sampled_from(VOCABULARY), min_size=1, max_size=4).map(
        lambda words: "Where is the " + " ".join(words) + "?"
    ),
    line,
).filter(str.strip)
distinct_lines = st.lists(line, min_size=SMALL + 1, max_size=3 * SMALL, unique=True)
"""More distinct lines than the shrunk bound: going through them evicts."""


@settings(max_examples=150, deadline=None)
@given(lines=distinct_lines, repeated=st.integers(1, SMALL), asked=question)
def test_cached_lines_give_what_the_uncached_reference_gives_on_hit_and_after_eviction(
    lines: list[str], repeated: int, asked: str
) -> None:
    # The last `repeated` lines come again: they are still cached (hits); the lines
    # before them went through a cache of SMALL lines (evictions).
    context = lines + lines[-repeated:]
    text = "\n".join(context)
    with small_caches() as caches:
        assert extractive.content_lines(text) == reference_content_lines(text)
        assert extractive.answer_from_context(asked, context) == (
            reference_answer_from_context(asked, context)
        )
        assert extractive.reply(asked, context) == reference_reply(asked, context)
        assert chunk_count(text) == len(word_chunks(text))
        for cache in caches.values():
            info = cache.cache_info()
            assert info.currsize <= SMALL
        for name in ("_content_line", "_word_count"):  # keyed by these distinct raw lines
            info = caches[name].cache_info()
            assert info.hits >= repeated and info.misses >= len(lines) > SMALL


@settings(max_examples=100, deadline=None)
@given(turns=st.lists(st.tuples(st.lists(line, max_size=12), question), min_size=1, max_size=6))
def test_consecutive_turns_answer_and_count_as_the_uncached_reference(
    turns: list[tuple[list[str], str]],
) -> None:
    """Turns whose context grows by the new lines (earlier lines repeated, as a
    participant's context does), a new question each; small caches both hit and evict."""
    model = OfflineLLM(time_to_first_token_s=0, tokens_per_second=0)
    context: list[str] = []
    with small_caches():
        for new_lines, asked in turns:
            context += new_lines
            text = "\n".join(context)
            messages = [ChatMessage("system", "You help operators.")]
            messages += [ChatMessage("user", text)] if text.strip() else []
            request = ChatRequest((*messages, ChatMessage("user", asked)))
            assert model.respond(request) == reference_respond(request)
            assert model._usage(request, 3) == reference_usage(request, 3)


@settings(max_examples=300, deadline=None)
@given(text=st.text())
def test_chunk_count_is_the_number_of_word_chunks_for_any_text(text: str) -> None:
    with small_caches():
        assert chunk_count(text) == len(word_chunks(text))
        assert chunk_count(text + text) == len(word_chunks(text + text))


async def test_streamed_turns_are_the_reference_reply_in_word_chunks_with_its_usage() -> None:
    model = OfflineLLM(time_to_first_token_s=0, tokens_per_second=0)
    for request in turn_requests(40) + turn_requests(5, first=2):
        expected = reference_respond(request)
        stream = model.stream(request.messages)
        chunks = [chunk async for chunk in stream]
        assert chunks == word_chunks(expected)
        assert stream.usage == reference_usage(request, len(chunks))
    cut = ChatRequest(turn_requests(1)[0].messages, ChatOptions(max_tokens=3))
    stream = model.stream(cut.messages, cut.options)
    assert [chunk async for chunk in stream] == word_chunks(reference_respond(cut))[:3]
    assert stream.finish_reason == "length"


def test_the_caches_hold_at_most_their_bound_of_lines() -> None:
    bound = extractive.LINE_CACHE_SIZE
    assert extractive._content_line.cache_info().maxsize == bound
    assert extractive._line_fact.cache_info().maxsize == bound
    assert chunking._word_count.cache_info().maxsize == chunking.COUNT_CACHE_SIZE
    lines = [f"[14:{n % 60:02d}] notes: crate {n} is on shelf {n % 9}" for n in range(bound + 500)]
    text = "\n".join(lines)
    extractive.answer_from_context("Where is crate 7?", extractive.content_lines(text))
    chunk_count(text)
    assert extractive._content_line.cache_info().currsize == bound
    assert extractive._line_fact.cache_info().currsize == bound
    assert chunking._word_count.cache_info().currsize == chunking.COUNT_CACHE_SIZE
