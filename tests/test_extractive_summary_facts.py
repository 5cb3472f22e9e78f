"""The extractive summariser keeps distinct facts in a small budget: what rendering adds
(speaker labels) scores nothing, and an answer echoing a fact is not kept beside it."""

from __future__ import annotations

from xrmq.actors.context.salience import extractive_summary


def test_speaker_labels_do_not_make_a_plain_sentence_outrank_a_fact() -> None:
    material = "User: ok, sounds good.\nMy sister lives in Paris."
    assert extractive_summary(material, 30) == "My sister lives in Paris."


def test_an_answer_echoing_a_fact_is_not_kept_beside_it() -> None:
    material = (
        "User: My sister lives in Paris.\n"
        "Assistant: Noted: your sister lives in Paris.\n"
        "User: The meeting is at 12.\n"
        "Assistant: Noted: the meeting is at 12.\n"
        "User: The printer is in room 12."
    )
    summary = extractive_summary(material, 120)
    assert "Paris" in summary and "meeting is at 12" in summary and "room 12" in summary
    assert summary.count("Paris") == 1 and summary.count("meeting") == 1


def test_a_fact_named_once_survives_two_merges_of_a_realtime_checkpoint() -> None:
    """The realtime demo's chain: 30 % of a 120-token window (144 bytes), the previous
    summary merged with each new head; the first fact must not be pushed out by the
    speaker labels and echoes of later ones."""
    first = extractive_summary(
        "User: My sister lives in Paris.\nAssistant: Noted: your sister lives in Paris.\n"
        "User: The fire drill starts at gate B.\n"
        "Assistant: Noted: the fire drill starts at gate B.",
        144,
    )
    second = extractive_summary(
        f"Previous summary:\n{first}\n\nTranscript:\n"
        "User: My car is the blue one.\nAssistant: Noted: your car is the blue one.\n"
        "User: The plant needs water on Fridays.\n"
        "Assistant: Noted: the plant needs water on Fridays.\n"
        "User: The meeting is at 12.\nAssistant: Noted: the meeting is at 12.",
        144,
    )
    third = extractive_summary(
        f"Previous summary:\n{second}\n\nTranscript:\n"
        "User: The cafe opens at 8.\nAssistant: Noted: the cafe opens at 8.",
        144,
    )
    assert "Paris" in second and "Paris" in third
