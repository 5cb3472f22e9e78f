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


def test_a_name_counts_as_much_as_a_number_so_names_are_not_the_first_to_go() -> None:
    material = (
        "User: My tutor is called Lucia Okafor.\n"
        "User: My desk extension is 6638.\n"
        "User: Remind me to water the plants."
    )
    summary = extractive_summary(material, 70)
    assert summary == "My tutor is called Lucia Okafor.\nMy desk extension is 6638."


def test_a_kept_sentence_loses_its_time_and_source_tags_and_user_label() -> None:
    material = (
        "[2026-12-01 12:55:59 UTC] User: My tutor is called Lucia Okafor.\n"
        "Assistant: Noted, Lucia Okafor it is, and the gym opens at 07:05.\n"
        "[2026-12-01 13:16:02 UTC] [notes] The tripod was moved to bay 10."
    )
    assert extractive_summary(material, 500).splitlines() == [
        "My tutor is called Lucia Okafor.",
        "Assistant: Noted, Lucia Okafor it is, and the gym opens at 07:05.",
        "The tripod was moved to bay 10.",
    ]


def test_a_later_value_of_the_same_subject_replaces_the_earlier_one() -> None:
    material = (
        "[notes] Aquarium reads 17.2 C.\n"
        "User: The budget meeting is in room 879.\n"
        "[notes] Aquarium reads 88.0 C.\n"
        "User: Actually, the budget meeting moved to room 539."
    )
    assert extractive_summary(material, 500).splitlines() == [
        "Aquarium reads 88.0 C.",
        "Actually, the budget meeting moved to room 539.",
    ]


def test_a_later_reading_replaces_a_line_of_several_earlier_readings() -> None:
    # A model's summary lists old readings on one line; the newest entry updates them all.
    material = (
        "- Aquarium readings -23.2 C, 81.9 C, and 85.6 C.\n"
        "- Meeting in room 12 at 09:00.\n"
        "[notes] The tripod was moved to bay 10.\n"
        "[notes] Aquarium reads 88.0 C.\n"
        "[notes] Meeting moved to room 539."
    )
    assert extractive_summary(material, 500).splitlines() == [
        "- Meeting in room 12 at 09:00.",  # its time is not restated: it stays
        "The tripod was moved to bay 10.",
        "Aquarium reads 88.0 C.",
        "Meeting moved to room 539.",
    ]


def test_a_summary_s_comma_list_is_weighed_fact_by_fact() -> None:
    # A small model joins its facts with commas: a stale reading inside the list gives way
    # to the newest, and the newest facts are not crowded out by the one long line.
    material = (
        "Visitor badge scanned at reception, aquarium readings were 73.9 C, 58.3 C, and"
        " 26.6 C, server rack b thermometer read -5.2 C, tripod moved to bay 10.\n"
        "[notes] The label printer was moved to bay 21.\n"
        "[notes] Aquarium reads 88.0 C.\n"
        "[notes] Server rack b thermometer reads 15.2 C."
    )
    assert extractive_summary(material, 140).splitlines() == [
        "tripod moved to bay 10.",
        "The label printer was moved to bay 21.",
        "Aquarium reads 88.0 C.",
        "Server rack b thermometer reads 15.2 C.",
    ]


def test_sentences_whose_values_name_different_things_are_all_kept() -> None:
    material = "Sensor S1 read 101 kPa.\nSensor S2 read 102 kPa.\nI parked the tripod in bay 36.\n"
    material += "I parked the label printer in bay 94."
    assert len(extractive_summary(material, 500).splitlines()) == 4


def test_of_equally_informative_sentences_the_newest_are_kept() -> None:
    material = "\n".join(f"Door D{i} opened at 10:{i:02d}." for i in range(10))
    summary = extractive_summary(material, 60)
    assert summary.splitlines() == ["Door D8 opened at 10:08.", "Door D9 opened at 10:09."]


def test_a_decimal_reading_is_one_value() -> None:
    from xrmq.actors.context.salience import salient_values

    assert salient_values("Aquarium reads 17.2 C, 1,250.50 at 10:30.") == {
        "17.2",
        "1,250.50",
        "10:30",
    }
