"""OfflineLLM: answers visibly from the context it is given, extractive summaries within
the stated limit, deterministic, paced like a small local model."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from xrmq.actors.models import (
    ChatMessage,
    ChatOptions,
    ChatRequest,
    OfflineLLM,
    compaction_limit,
    compaction_limit_instruction,
)
from xrmq.actors.models.extractive import NO_MATCH_ANSWER, extractive_summary

SYSTEM = ChatMessage("system", "You are a helpful assistant for an XR headset user.")
CONTEXT = ChatMessage(
    "user",
    "Summary: Bob prefers tea.\n"
    "[14:02] camera: a red mug on the desk next to the laptop\n"
    "[14:05] notes: Alice booked room 4B for the design review at 15:30\n"
    "Current time: 14:10",
)
DIALOGUE_PROMPT = "Summarize the completed conversation history for future turns."


def instant() -> OfflineLLM:
    return OfflineLLM(time_to_first_token_s=0, tokens_per_second=0)


def ask(question: str, context: ChatMessage = CONTEXT) -> list[ChatMessage]:
    return [SYSTEM, context, ChatMessage("user", question)]


def compaction(material: str, limit: int, prompt: str = DIALOGUE_PROMPT) -> list[ChatMessage]:
    return [
        ChatMessage("system", f"{prompt}\n{compaction_limit_instruction(limit)}"),
        ChatMessage("user", material),
    ]


async def test_answers_from_the_context_line_matching_the_question() -> None:
    completion = await instant().complete(ask("Which room did Alice book?"))
    assert completion.text == "Notes: Alice booked room 4B for the design review at 15:30."


async def test_answer_uses_only_context_it_was_given() -> None:
    without_mug = ChatMessage("user", "[14:05] notes: Alice booked room 4B\nCurrent time: 14:10")
    with_mug = await instant().complete(ask("Where is the mug?"))
    without = await instant().complete(ask("Where is the mug?", without_mug))
    assert "red mug on the desk" in with_mug.text
    assert "mug" not in without.text and "room 4B" not in without.text
    assert without.text == NO_MATCH_ANSWER


async def test_says_plainly_when_nothing_in_context_matches() -> None:
    completion = await instant().complete(ask("What is the weather in Paris?"))
    assert completion.text == NO_MATCH_ANSWER


async def test_second_line_is_added_for_question_words_the_first_does_not_cover() -> None:
    completion = await instant().complete(ask("Where is the laptop and what does Bob prefer?"))
    assert completion.text == (
        "Summary: Bob prefers tea. Camera: a red mug on the desk next to the laptop."
    )


async def test_a_later_line_wins_a_tie_as_the_newer_fact() -> None:
    context = ChatMessage(
        "user", "[09:00] the meeting is in room 12\n[09:30] the meeting is in room 14"
    )
    completion = await instant().complete(ask("Where is the meeting?", context))
    assert "room 14" in completion.text and "room 12" not in completion.text


async def test_summary_stays_within_the_stated_limit_and_keeps_names_and_numbers() -> None:
    material = (
        "Previous summary:\nBob prefers tea. Badge AX-1193 belongs to Alice.\n---\n"
        "user: actually the review moved to 10:45 in room 12.\nassistant: Noted, 10:45 in room "
        "12.\n"
        "user: the weather is nice today and I like long walks in the park on sunny days.\n"
        "assistant: That sounds lovely, enjoy the walks."
    )
    completion = await instant().complete(compaction(material, 160), ChatOptions(thinking=False))
    assert len(completion.text.encode()) <= 160
    for kept in ("Bob", "AX-1193", "Alice", "10:45", "room 12"):
        assert kept in completion.text  # the previous summary and the new entries merge
    assert "walks in the park" not in completion.text
    assert "Previous summary:" not in completion.text and "---" not in completion.text


async def test_summary_is_shortened_when_no_sentence_fits() -> None:
    completion = await instant().complete(
        compaction("Alice booked room 4B for the design review at 15:30.", 24)
    )
    assert len(completion.text.encode()) <= 24
    assert completion.text.endswith("…")


@settings(max_examples=200, deadline=None)
@given(material=st.text(min_size=1, max_size=400), limit=st.integers(min_value=1, max_value=300))
def test_extractive_summary_never_exceeds_the_limit_in_utf8_bytes(
    material: str, limit: int
) -> None:
    assert len(extractive_summary(material, limit).encode("utf-8")) <= limit


async def test_same_input_gives_the_same_output() -> None:
    first = await instant().complete(ask("Which room did Alice book?"))
    second = await OfflineLLM(time_to_first_token_s=0, tokens_per_second=0).complete(
        ask("Which room did Alice book?")
    )
    assert first == second
    material = "Bob prefers tea.\nAlice booked room 4B at 15:30.\nThe lamp is blue."
    assert (await instant().complete(compaction(material, 40))) == (
        await instant().complete(compaction(material, 40))
    )


async def test_streams_word_sized_chunks_with_usage() -> None:
    chunks = []
    async with instant().stream(ask("Where is the mug?")) as stream:
        async for chunk in stream:
            chunks.append(chunk)
    assert len(chunks) > 5
    assert all(len(chunk.split()) == 1 for chunk in chunks)
    assert stream.finish_reason == "stop"
    assert (
        stream.usage is not None
        and stream.usage.output_tokens == len(chunks)
        and stream.usage.input_tokens
    )


async def test_max_tokens_cuts_the_reply_off_with_finish_reason_length() -> None:
    completion = await instant().complete(ask("Where is the mug?"), ChatOptions(max_tokens=3))
    assert completion.text == "Camera: a red"
    assert completion.finish_reason == "length"


async def test_pacing_waits_time_to_first_token_then_one_token_interval_between_chunks() -> None:
    waits: list[float] = []

    async def record(seconds: float) -> None:
        waits.append(seconds)

    llm = OfflineLLM(time_to_first_token_s=0.25, tokens_per_second=40, sleep=record)
    request = ask("Where is the mug?")
    text = llm.respond(ChatRequest(tuple(request)))
    chunks = [chunk async for chunk in llm.stream(request)]
    assert "".join(chunks) == text
    assert waits == [0.25] + [1 / 40] * (len(chunks) - 1)


def test_default_pacing_is_that_of_a_small_local_model() -> None:
    llm = OfflineLLM()
    assert (llm.time_to_first_token_s, llm.tokens_per_second) == (0.25, 40.0)


def test_invalid_pacing_raises_value_error_naming_the_rule() -> None:
    with pytest.raises(ValueError, match=r"OfflineLLM.time_to_first_token_s: must be non-negative"):
        OfflineLLM(time_to_first_token_s=-1)
    with pytest.raises(ValueError, match=r"OfflineLLM.tokens_per_second: must be non-negative"):
        OfflineLLM(tokens_per_second=-1)


def test_compaction_limit_phrase_round_trips_and_the_appended_line_wins() -> None:
    prompt = f"Quote: 'Write at most 9 bytes of plain text.'\n{compaction_limit_instruction(1200)}"
    assert compaction_limit(prompt) == 1200
    assert compaction_limit(DIALOGUE_PROMPT) is None
    with pytest.raises(ValueError, match=r"limit_bytes: must be a positive integer"):
        compaction_limit_instruction(0)


def test_offline_answer_does_not_read_out_the_time_and_source_tags_of_a_context_line():
    from xrmq.actors.models.extractive import answer_from_context

    line = "[2026-11-29 19:42:12 UTC] [notes] The kettle in lab 3 is set to 85 degrees."
    assert answer_from_context("What is the kettle set to?", [line]) == (
        "The kettle in lab 3 is set to 85 degrees."
    )


def test_offline_answer_says_what_the_user_said_not_its_own_earlier_answers():
    from xrmq.actors.models.extractive import answer_from_context

    context = [
        "[2026-11-29 19:42:12 UTC] User: My badge number is 4471.",
        "Assistant: From what I have: your badge number is 4471.",
    ]
    assert answer_from_context("What is my badge number?", context) == "Your badge number is 4471."


def test_offline_answer_does_not_read_out_summary_and_state_labels():
    from xrmq.actors.models.extractive import answer_from_context

    context = [
        "Summary of earlier conversation: [2026-11-29 20:30:19 UTC] User: I left the spare key in "
        "drawer 12.",
        "[2026-11-29 20:30:20 UTC] [scene] Current state: Bob is at the loading dock next to "
        "pallet P-12.",
    ]
    assert (
        answer_from_context("Where is the spare key?", context)
        == "You left the spare key in drawer 12."
    )
    assert answer_from_context("Which pallet is at the dock?", context) == (
        "Bob is at the loading dock next to pallet P-12."
    )


async def test_a_first_person_look_alike_is_said_back_as_written_not_a_crash() -> None:
    # "İ", "ı" and "ſ" match "i" and "s" only case-insensitively; they lowered to no key.
    for said in ("İ left the key in drawer 12", "ı left the key", "I did it myſelf"):
        completion = await instant().complete(ask(said))
        assert completion.text.startswith("Noted: ") and said.split()[-1] in completion.text
