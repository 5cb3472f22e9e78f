"""Clipping, rendered text formats and the participant merge (docs/context.md, "Prompt layout")."""

from __future__ import annotations

import pytest

from xrmq.actors.context import OMISSION_MARKER, clip_middle, render_participant, utf8_size
from xrmq.actors.context.render import (
    MAX_TIMESTAMP_US,
    exchange_text,
    format_time,
    state_text,
    summary_label,
    update_text,
)
from xrmq.schemas import ContextBlock

T0 = 1_714_572_785_000_000  # 2024-05-01 14:13:05 UTC

# --- clipping --------------------------------------------------------------------------


def test_clip_returns_text_that_fits_unchanged():
    assert clip_middle("héllo", 6) == "héllo"


def test_clip_keeps_start_and_end_around_the_marker_within_the_limit():
    text = "START" + "-" * 100 + "END"
    clipped = clip_middle(text, 60)
    assert utf8_size(clipped) <= 60
    head, tail = clipped.split(OMISSION_MARKER)
    assert text.startswith(head) and head.startswith("START")
    assert text.endswith(tail) and tail.endswith("END")


def test_clip_gives_the_start_the_extra_byte_of_an_odd_split():
    clipped = clip_middle("a" * 50 + "b" * 50, utf8_size(OMISSION_MARKER) + 11)
    head, tail = clipped.split(OMISSION_MARKER)
    assert (len(head), len(tail)) == (6, 5)


def test_clip_never_cuts_inside_a_multibyte_character():
    text = "€" * 40  # 3 bytes each
    clipped = clip_middle(text, utf8_size(OMISSION_MARKER) + 10)
    head, tail = clipped.split(OMISSION_MARKER)
    assert head == "€" and tail == "€"  # 5 bytes of room each side hold one whole euro


def test_clip_below_the_marker_size_keeps_only_whole_characters_of_the_start():
    assert clip_middle("日本語のテキスト", 7) == "日本"
    assert clip_middle("abc", 0) == ""


# --- rendered text formats ---------------------------------------------------------------


def test_time_is_shown_in_utc_to_the_second_from_the_given_microseconds():
    assert format_time(T0 + 999_999) == "2024-05-01 14:13:05 UTC"
    assert format_time(0) == "1970-01-01 00:00:00 UTC"
    assert format_time(MAX_TIMESTAMP_US) == "9999-12-31 23:59:59 UTC"


def test_exchange_renders_its_time_then_user_and_assistant_lines():
    assert (
        exchange_text("When?", "At 3.", T0)
        == "[2024-05-01 14:13:05 UTC] User: When?\nAssistant: At 3."
    )


def test_incremental_update_renders_its_time_and_topic():
    assert (
        update_text("sample.notes", "Buy milk", T0)
        == "[2024-05-01 14:13:05 UTC] [sample.notes] Buy milk"
    )


def test_summary_topic_state_renders_as_the_topics_current_state():
    assert (
        state_text("sample.monitor-window", "Editor open", T0)
        == "[2024-05-01 14:13:05 UTC] [sample.monitor-window] Current state: Editor open"
    )


def test_summaries_are_introduced_by_their_section():
    assert summary_label("dialogue", dialogue=True) == "Summary of earlier conversation: "
    assert (
        summary_label("sample.notes", dialogue=False)
        == "Summary of earlier [sample.notes] context: "
    )
    assert summary_label("dialogue", dialogue=False) == "Summary of earlier [dialogue] context: "


# --- merging a participant's sections ------------------------------------------------------


def test_participant_blocks_are_summaries_first_then_entries_in_recorded_time_order():
    dialogue = [
        ContextBlock(None, "dialogue summary"),
        ContextBlock(30, "exchange at 30"),
        ContextBlock(50, "exchange at 50"),
    ]
    notes = [ContextBlock(None, "notes summary"), ContextBlock(40, "note at 40")]
    window = [ContextBlock(10, "window state at 10")]
    merged = render_participant([dialogue, notes, window])
    assert [block.text for block in merged] == [
        "dialogue summary",
        "notes summary",
        "window state at 10",
        "exchange at 30",
        "note at 40",
        "exchange at 50",
    ]


def test_participant_blocks_with_equal_times_keep_section_order():
    merged = render_participant([[ContextBlock(5, "dialogue")], [ContextBlock(5, "topic")]])
    assert [block.text for block in merged] == ["dialogue", "topic"]


@pytest.mark.parametrize("sections", [[], [[]], [[], []]])
def test_participant_without_context_renders_no_blocks(sections):
    assert render_participant(sections) == ()
