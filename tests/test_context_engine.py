"""The context engine's section state machine (docs/context.md, "Compaction" and "Snapshot
compaction").

Each test drives one ``Section`` and its ``SectionState`` directly: entries in,
``next_compaction`` out, a scripted ``CompactionResult`` back in, ``render`` checked.
The rows of the Situation/Handling table (docs/context.md) have their own headings below.
"""

from __future__ import annotations

import msgspec
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from xrmq.actors.context import (
    OMISSION_MARKER,
    ApplyStatus,
    CompactionResult,
    CompactionSettings,
    Section,
    SectionSpec,
    SectionState,
    render_participant,
    utf8_size,
)
from xrmq.actors.context.compaction import compact_message
from xrmq.actors.context.state import SectionKind, exchange_identity, history_tail
from xrmq.actors.models import compaction_limit
from xrmq.schemas import CompactionPrompts

T0 = 1_714_572_785_000_000  # 2024-05-01 14:13:05 UTC
SECOND = 1_000_000
UPDATE_HEADER = 41  # "[2024-05-01 14:13:05 UTC] [sample.notes] "
EXCHANGE_HEADER = 44  # "[2024-05-01 14:13:05 UTC] User: \nAssistant: "


def make_dialogue(
    budget: int = 1000, input_budget: int | None = None, prompts: CompactionPrompts | None = None
):
    settings = CompactionSettings(input_budget or budget // 2 + 256, prompts or CompactionPrompts())
    return Section(SectionSpec("dialogue", "dialogue", budget), settings)


def make_topic(
    budget: int = 1000, input_budget: int | None = None, kind: SectionKind = "incremental"
):
    return Section(
        SectionSpec("sample.notes", kind, budget),
        CompactionSettings(input_budget or budget // 2 + 256),
    )


def exchange(
    section: Section, state: SectionState, i: int, size: int = 100, exchange_id: str | None = None
) -> None:
    """Record exchange ``i`` at T0 + i seconds, rendered to exactly ``size`` bytes."""
    request = f"q{i}"
    answer = f"a{i}-".ljust(size - EXCHANGE_HEADER - len(request), "a")
    assert section.record_exchange(
        state, request, answer, timestamp_us=T0 + i * SECOND, exchange_id=exchange_id or f"turn-{i}"
    )


def update(section: Section, state: SectionState, i: int, size: int = 100) -> None:
    """Append update ``i`` at T0 + i seconds, rendered to exactly ``size`` bytes."""
    section.append_update(
        state, f"u{i}-".ljust(size - UPDATE_HEADER, "x"), timestamp_us=T0 + i * SECOND
    )


def ok(request, text: str = "summary of earlier material") -> CompactionResult:
    return CompactionResult(request.job, text, finish_reason="stop")


def entry_ids(state: SectionState) -> list[int]:
    return [entry.entry_id for entry in state.entries]


def rendered_bytes(section: Section, state: SectionState) -> int:
    return sum(utf8_size(block.text) for block in section.render(state).blocks)


# --- budgets, trigger and limits ---------------------------------------------------------


def test_entry_size_is_utf8_bytes_of_its_rendered_text():
    section = make_dialogue()
    state = section.new_state("g")
    section.record_exchange(state, "¿Qué?", "日本", timestamp_us=T0, exchange_id="t")
    entry = state.entries[0]
    assert entry.text == "[2024-05-01 14:13:05 UTC] User: ¿Qué?\nAssistant: 日本"
    assert entry.size == len(entry.text.encode("utf-8")) > len(entry.text)


def test_compaction_triggers_only_when_uncompacted_entries_exceed_half_the_budget():
    section = make_topic(budget=1000)
    state = section.new_state("g")
    for i in range(5):
        update(section, state, i, size=100)
    assert section.uncompacted_bytes(state) == 500
    assert not section.compaction_due(state)
    assert section.next_compaction(state) is None
    section.append_update(state, "", timestamp_us=T0 + 9 * SECOND)  # 41 more bytes
    assert section.compaction_due(state)
    assert section.next_compaction(state) is not None


def test_summary_limit_is_a_quarter_of_the_budget_and_stated_in_the_request():
    section = make_dialogue(budget=2000)
    state = section.new_state("g")
    for i in range(11):
        exchange(section, state, i)
    request = section.next_compaction(state)
    assert request.limit_bytes == 500
    assert compaction_limit(request.system_prompt) == 500


def test_summary_limit_is_at_least_one_byte_for_a_tiny_budget():
    assert SectionSpec("dialogue", "dialogue", 3).summary_limit_bytes == 1


def test_request_system_prompt_is_the_configured_prompt_then_limit_and_plain_text_format():
    prompts = CompactionPrompts(
        dialogue="Keep the dialogue.", source="Keep the source.", condense="Shorten."
    )
    section = make_dialogue(prompts=prompts)
    state = section.new_state("g")
    for i in range(6):
        exchange(section, state, i)
    request = section.next_compaction(state)
    assert request.kind == "compact"
    assert request.system_prompt.startswith("Keep the dialogue.\n\n")
    assert "plain text" in request.system_prompt and "Markdown" in request.system_prompt
    topic = Section(
        SectionSpec("sample.notes", "incremental", 1000), CompactionSettings(756, prompts)
    )
    topic_state = topic.new_state("g")
    for i in range(6):
        update(topic, topic_state, i)
    assert topic.next_compaction(topic_state).system_prompt.startswith("Keep the source.\n\n")


def test_request_material_is_previous_summary_then_oldest_entries_oldest_first():
    section = make_topic(budget=1000)
    state = section.new_state("g")
    for i in range(6):
        update(section, state, i)
    first = section.next_compaction(state)
    texts = [entry.text for entry in state.entries]
    assert first.user_message == compact_message("", texts)
    assert section.apply_result(state, ok(first, "S1")) is ApplyStatus.APPLIED
    for i in range(6, 12):
        update(section, state, i)
    second = section.next_compaction(state)
    assert second.user_message == compact_message("S1", [entry.text for entry in state.entries])
    assert second.user_message.startswith(
        "<previous_summary>\nS1\n</previous_summary>\n\n<material>\n"
    )


def test_larger_backlog_is_compacted_oldest_first_in_several_requests_within_the_input_budget():
    section = make_topic(budget=2000, input_budget=1256)
    state = section.new_state("g")
    for i in range(30):
        update(section, state, i, size=100)  # triggers at 11; keep going, nothing issued yet
    request = section.next_compaction(state)
    snapshots = []
    summary = ""
    while request is not None:
        snapshot = state.pending.entry_ids
        snapshots.append(snapshot)
        material = utf8_size(summary) + 100 * len(snapshot)
        assert material <= 1256
        # 100-byte summaries without values (a guard holds each to its predecessor's)
        summary = ("one ", "two ", "six ")[len(snapshots) - 1] * 25
        assert section.apply_result(state, ok(request, summary)) is ApplyStatus.APPLIED
        request = section.next_compaction(state)
    assert len(snapshots) == 3
    # oldest first, all of them
    assert [i for snapshot in snapshots for i in snapshot] == list(range(1, 31))
    assert [len(s) for s in snapshots] == [12, 11, 7]
    assert state.entries == [] and state.summary == ("six " * 25).strip()


def test_entries_recorded_during_a_run_are_not_part_of_it():
    section = make_topic(budget=1000)
    state = section.new_state("g")
    for i in range(6):
        update(section, state, i)
    request = section.next_compaction(state)
    for i in range(6, 9):
        update(section, state, i)
    section.apply_result(state, ok(request))
    assert entry_ids(state) == [7, 8, 9]
    assert section.next_compaction(state) is None  # 300 bytes: under the trigger


def test_a_new_run_starts_when_the_trigger_holds_again():
    section = make_topic(budget=1000)
    state = section.new_state("g")
    for i in range(6):
        update(section, state, i)
    section.apply_result(state, ok(section.next_compaction(state)))
    for i in range(6, 12):
        update(section, state, i)
    request = section.next_compaction(state)
    assert state.pending.entry_ids == (7, 8, 9, 10, 11, 12)
    assert request.job.job_id == 2


def test_newest_dialogue_exchange_is_never_sent_to_compaction():
    section = make_dialogue(budget=1000)
    state = section.new_state("g")
    for i in range(6):
        exchange(section, state, i)
    newest = state.entries[-1]
    request = section.next_compaction(state)
    assert newest.entry_id not in state.pending.entry_ids
    assert newest.text not in request.user_message
    section.apply_result(state, ok(request))
    assert state.entries == [newest]


def test_single_large_newest_exchange_alone_issues_no_compaction():
    section = make_dialogue(budget=1000)
    state = section.new_state("g")
    exchange(section, state, 0, size=900)
    assert section.compaction_due(state)
    assert section.next_compaction(state) is None


def test_newest_incremental_update_is_compacted_with_the_rest():
    section = make_topic(budget=1000)
    state = section.new_state("g")
    for i in range(6):
        update(section, state, i)
    section.next_compaction(state)
    assert state.pending.entry_ids == tuple(range(1, 7))


def test_summary_topic_is_never_compacted_and_each_update_replaces_its_state():
    section = make_topic(budget=1000, kind="summary")
    state = section.new_state("g")
    section.replace_state(state, "window A open", timestamp_us=T0)
    section.replace_state(state, "window B open " + "x" * 900, timestamp_us=T0 + SECOND)
    assert len(state.entries) == 1 and "window B open" in state.entries[0].text
    assert not section.compaction_due(state)
    assert section.next_compaction(state) is None
    blocks = section.render(state).blocks
    assert [block.timestamp_us for block in blocks] == [T0 + SECOND]
    assert blocks[0].text.startswith(
        "[2024-05-01 14:13:06 UTC] [sample.notes] Current state: window B open"
    )


def test_only_one_compaction_job_is_in_flight_per_section():
    section = make_topic(budget=1000)
    state = section.new_state("g")
    for i in range(6):
        update(section, state, i)
    assert section.next_compaction(state) is not None
    for i in range(6, 20):
        update(section, state, i)
    assert section.next_compaction(state) is None


def test_operations_of_another_section_kind_are_rejected_naming_the_operation():
    dialogue, topic = make_dialogue(), make_topic()
    with pytest.raises(ValueError, match="append_update: section 'dialogue' is a dialogue section"):
        dialogue.append_update(dialogue.new_state("g"), "x", timestamp_us=T0)
    with pytest.raises(
        ValueError, match="record_exchange: section 'sample.notes' is a incremental section"
    ):
        topic.record_exchange(topic.new_state("g"), "q", "a", timestamp_us=T0, exchange_id=None)
    with pytest.raises(ValueError, match="replace_state"):
        topic.replace_state(topic.new_state("g"), "x", timestamp_us=T0)


def test_timestamps_must_be_unix_microseconds_a_block_can_show():
    section = make_topic()
    state = section.new_state("g")
    with pytest.raises(ValueError, match="timestamp_us: must be between"):
        section.append_update(state, "x", timestamp_us=-1)
    with pytest.raises(ValueError, match="timestamp_us: must be an int"):
        section.append_update(state, "x", timestamp_us=1.5)
    assert state.entries == []


def test_section_rejects_an_input_budget_below_half_its_budget_plus_256():
    with pytest.raises(
        ValueError, match="compaction_input_budget_bytes: must be at least half the section budget"
    ):
        Section(SectionSpec("dialogue", "dialogue", 1000), CompactionSettings(755))
    Section(SectionSpec("dialogue", "dialogue", 1000), CompactionSettings(756))


def test_section_spec_requires_a_name_and_a_positive_budget():
    with pytest.raises(ValueError, match="SectionSpec.name"):
        SectionSpec("", "dialogue", 10)
    with pytest.raises(ValueError, match="SectionSpec.budget_bytes: must be a positive int"):
        SectionSpec("dialogue", "dialogue", 0)


# --- snapshot and watermark (docs/context.md, "Snapshot compaction") -----------------------


def test_entries_added_during_an_in_flight_compaction_survive_it():
    section = make_dialogue(budget=1000)
    state = section.new_state("g")
    for i in range(6):
        exchange(section, state, i)
    request = section.next_compaction(state)
    exchange(section, state, 6)
    exchange(section, state, 7)
    assert section.apply_result(state, ok(request, "S")) is ApplyStatus.APPLIED
    assert entry_ids(state) == [6, 7, 8]  # the retained newest at snapshot time, and both new ones
    assert state.summary == "S"


def test_an_entry_recorded_meanwhile_with_an_older_time_survives_the_compaction():
    section = make_topic(budget=1000)
    state = section.new_state("g")
    for i in range(10, 16):
        update(section, state, i)
    request = section.next_compaction(state)
    update(section, state, 0)  # published earlier, delivered late
    section.apply_result(state, ok(request))
    assert [entry.timestamp_us for entry in state.entries] == [T0]


def test_result_for_a_cleared_and_recreated_state_is_discarded():
    section = make_topic(budget=1000)
    old = section.new_state("g1")
    for i in range(6):
        update(section, old, i)
    request = section.next_compaction(old)
    fresh = section.new_state("g2")  # clear(): the actor forgets old and starts anew
    for i in range(6):
        update(section, fresh, i)
    section.next_compaction(fresh)
    before = msgspec.msgpack.encode(fresh)
    assert request.job.job_id == fresh.pending.request.job.job_id
    assert section.apply_result(fresh, ok(request)) is ApplyStatus.STALE
    assert msgspec.msgpack.encode(fresh) == before


def test_result_for_an_already_answered_job_is_discarded():
    section = make_topic(budget=1000)
    state = section.new_state("g")
    for i in range(6):
        update(section, state, i)
    request = section.next_compaction(state)
    assert section.apply_result(state, ok(request, "first")) is ApplyStatus.APPLIED
    assert section.apply_result(state, ok(request, "second")) is ApplyStatus.STALE
    assert state.summary == "first"


def test_pending_request_can_be_resent_after_a_timeout_and_the_first_answer_wins():
    section = make_topic(budget=1000)
    state = section.new_state("g")
    for i in range(6):
        update(section, state, i)
    request = section.next_compaction(state)
    assert state.pending.request == request  # what a restarted actor re-sends
    assert section.apply_result(state, ok(request, "from worker 2")) is ApplyStatus.APPLIED
    assert section.apply_result(state, ok(request, "from worker 1, late")) is ApplyStatus.STALE
    assert state.summary == "from worker 2"


def test_result_of_a_failed_job_arriving_after_a_retry_is_discarded():
    section = make_topic(budget=1000)
    state = section.new_state("g")
    for i in range(6):
        update(section, state, i)
    first = section.next_compaction(state)
    section.apply_result(state, CompactionResult(first.job, error="timeout"))
    update(section, state, 6)
    second = section.next_compaction(state)
    assert second.job != first.job
    assert section.apply_result(state, ok(first, "late")) is ApplyStatus.STALE
    assert state.pending is not None and state.summary == ""


def test_state_journaled_mid_compaction_restores_and_accepts_the_result():
    section = make_dialogue(budget=1000)
    state = section.new_state("g")
    for i in range(6):
        exchange(section, state, i)
    request = section.next_compaction(state)
    restored = msgspec.msgpack.decode(msgspec.msgpack.encode(state), type=SectionState)
    assert restored == state
    assert section.apply_result(restored, ok(request, "S")) is ApplyStatus.APPLIED
    assert restored.summary == "S"
    assert (
        section.record_exchange(restored, "q0", "x", timestamp_us=T0, exchange_id="turn-0") is False
    )


def test_revision_increases_when_the_rendered_section_can_change_and_only_then():
    section = make_topic(budget=1000)
    state = section.new_state("g")
    for i in range(6):
        update(section, state, i)
    assert state.revision == 6
    request = section.next_compaction(state)
    assert state.revision == 6  # issuing a job changes nothing rendered
    section.apply_result(state, CompactionResult(request.job, error="boom"))
    assert state.revision == 6
    update(section, state, 6)
    section.apply_result(state, ok(section.next_compaction(state)))
    assert state.revision == 8
    assert section.render(state).revision == 8


# --- table row: the model returns a summary over its limit --------------------------------


def over_limit_setup():
    section = make_topic(budget=1000)  # summary limit 250
    state = section.new_state("g")
    for i in range(6):
        update(section, state, i)
    compact = section.next_compaction(state)
    long_summary = "Start of the long summary. " + "m" * 400 + " End of the long summary."
    assert section.apply_result(state, ok(compact, long_summary)) is ApplyStatus.CONDENSE_DUE
    return section, state, long_summary


def test_over_limit_summary_gets_one_condense_request_with_the_condense_prompt():
    section, state, long_summary = over_limit_setup()
    assert state.summary == "" and len(state.entries) == 6  # nothing applied yet
    condense = section.next_compaction(state)
    assert condense.kind == "condense"
    assert condense.system_prompt.startswith(CompactionPrompts().condense)
    assert condense.limit_bytes == 250
    assert condense.user_message == f"<summary>\n{long_summary}\n</summary>"


def test_condensed_summary_within_the_limit_is_applied():
    section, state, _ = over_limit_setup()
    condense = section.next_compaction(state)
    assert section.apply_result(state, ok(condense, "Short summary.")) is ApplyStatus.APPLIED
    assert state.summary == "Short summary." and state.entries == []
    assert section.next_compaction(state) is None


def test_condense_cut_off_keeps_start_and_end_of_the_summary_within_the_limit():
    section, state, _long_summary = over_limit_setup()
    condense = section.next_compaction(state)
    status = section.apply_result(
        state, CompactionResult(condense.job, "Start of", finish_reason="length")
    )
    assert status is ApplyStatus.CLIPPED
    assert utf8_size(state.summary) <= 250
    assert state.summary.startswith("Start of the long summary.")
    assert state.summary.endswith("End of the long summary.")
    assert OMISSION_MARKER in state.summary
    assert state.entries == []
    assert section.next_compaction(state) is None  # one condense request, no more


def test_condensed_summary_still_too_long_keeps_its_start_and_end_within_the_limit():
    section, state, _ = over_limit_setup()
    condense = section.next_compaction(state)
    still_long = "Condensed start. " + "c" * 300 + " Condensed end."
    assert section.apply_result(state, ok(condense, still_long)) is ApplyStatus.CLIPPED
    assert utf8_size(state.summary) <= 250
    assert state.summary.startswith("Condensed start.") and state.summary.endswith("Condensed end.")
    assert section.next_compaction(state) is None


@pytest.mark.parametrize("result", [{"text": ""}, {"error": "model unavailable"}])
def test_condense_empty_or_failed_keeps_start_and_end_of_the_summary(result):
    section, state, _ = over_limit_setup()
    condense = section.next_compaction(state)
    assert (
        section.apply_result(state, CompactionResult(condense.job, **result)) is ApplyStatus.CLIPPED
    )
    assert (
        state.summary.startswith("Start of the long summary.") and utf8_size(state.summary) <= 250
    )


def test_condense_request_material_larger_than_the_input_budget_keeps_start_and_end():
    section = make_topic(budget=1000, input_budget=756)
    state = section.new_state("g")
    for i in range(6):
        update(section, state, i)
    huge = "Huge start. " + "h" * 5000 + " Huge end."
    section.apply_result(state, ok(section.next_compaction(state), huge))
    condense = section.next_compaction(state)
    material = condense.user_message.removeprefix("<summary>\n").removesuffix("\n</summary>")
    assert utf8_size(material) <= 756
    assert (
        material.startswith("Huge start.")
        and material.endswith("Huge end.")
        and OMISSION_MARKER in material
    )


# --- table row: empty summary, cut off, or an error ----------------------------------------


@pytest.mark.parametrize(
    "result",
    [
        {"text": "", "finish_reason": "stop"},
        {"text": "  \n ", "finish_reason": "stop"},
        {"text": "partial summ", "finish_reason": "length"},
        {"text": "withheld", "finish_reason": "content_filter"},
        {"text": "", "error": "ModelUnavailable: connection refused"},
        {"text": "looks fine", "error": "stream failed after 3 chunks"},
    ],
    ids=["empty", "blank", "cut-off", "content-filter", "error", "error-with-text"],
)
def test_failed_compaction_keeps_entries_and_retries_after_the_sections_next_entry(result):
    section = make_topic(budget=1000)
    state = section.new_state("g")
    for i in range(6):
        update(section, state, i)
    request = section.next_compaction(state)
    kept = list(state.entries)
    assert (
        section.apply_result(state, CompactionResult(request.job, **result)) is ApplyStatus.FAILED
    )
    assert state.entries == kept and state.summary == ""
    assert section.next_compaction(state) is None  # not before the next entry
    update(section, state, 6)
    retry = section.next_compaction(state)
    assert retry is not None
    assert state.pending.entry_ids == tuple(range(1, 8))


def test_failure_mid_run_keeps_earlier_applied_batches_and_the_remaining_entries():
    section = make_topic(budget=2000, input_budget=1256)
    state = section.new_state("g")
    for i in range(30):
        update(section, state, i)
    section.apply_result(state, ok(section.next_compaction(state), "S1"))
    second = section.next_compaction(state)
    section.apply_result(state, CompactionResult(second.job, error="timeout"))
    assert state.summary == "S1"
    assert entry_ids(state) == list(range(13, 31))
    assert section.next_compaction(state) is None


# --- table row: one exchange or update exceeds a compaction request ------------------------


def test_entry_larger_than_a_compaction_request_is_sent_with_start_and_end_and_a_marker():
    section = make_topic(budget=1000, input_budget=756)
    state = section.new_state("g")
    section.append_update(state, "BEGIN " + "z" * 3000 + " FINISH", timestamp_us=T0)
    update(section, state, 1)
    update(section, state, 2)
    first = section.next_compaction(state)
    assert state.pending.entry_ids == (1,)
    material = first.user_message.removeprefix("<material>\n").removesuffix("\n</material>")
    assert utf8_size(material) <= 756
    assert "BEGIN" in material and material.endswith("FINISH") and OMISSION_MARKER in material
    section.apply_result(state, ok(first, "big update summarized"))
    second = section.next_compaction(state)  # later entries still compact
    assert state.pending.entry_ids == (2, 3)
    assert second.user_message.startswith("<previous_summary>\nbig update summarized\n")


def test_oversized_entry_after_others_starts_the_next_request():
    section = make_topic(budget=1000, input_budget=756)
    state = section.new_state("g")
    update(section, state, 0)
    section.append_update(state, "y" * 2000, timestamp_us=T0 + SECOND)
    section.next_compaction(state)
    assert state.pending.entry_ids == (1,)


# --- table row: a section exceeds its budget while compaction is pending -------------------


def test_section_over_budget_while_pending_leaves_out_oldest_keeps_newest_and_warns():
    section = make_dialogue(budget=1000)
    state = section.new_state("g")
    for i in range(6):
        exchange(section, state, i, size=100)
    section.next_compaction(state)
    for i in range(6, 14):
        exchange(section, state, i, size=100)  # 1400 bytes stored, compaction pending
    rendered = section.render(state)
    assert [block.timestamp_us for block in rendered.blocks] == [
        T0 + i * SECOND for i in range(4, 14)
    ]
    assert rendered_bytes(section, state) <= 1000
    assert rendered.warning is not None
    assert rendered.warning.omitted_entries == 4 and not rendered.warning.clipped_newest
    assert rendered.warning.stored_bytes == 1400
    assert "'dialogue'" in rendered.warning.message() and "4 oldest" in rendered.warning.message()
    assert len(state.entries) == 14  # stay stored until compacted


def test_over_budget_rendering_counts_the_summary_against_the_budget():
    section = make_topic(budget=1000)
    state = section.new_state("g")
    for i in range(6):
        update(section, state, i)
    section.apply_result(state, ok(section.next_compaction(state), "s" * 250))
    for i in range(6, 11):
        update(section, state, i)
    section.next_compaction(state)
    for i in range(11, 14):
        update(section, state, i)
    rendered = section.render(state)
    assert rendered.blocks[0].timestamp_us is None
    assert utf8_size(rendered.blocks[0].text) == 250 + len(
        "Summary of earlier [sample.notes] context: "
    )
    assert len(rendered.blocks) == 1 + 7 and rendered.warning.omitted_entries == 1
    assert rendered_bytes(section, state) <= 1000


def test_within_budget_rendering_has_no_warning():
    section = make_dialogue(budget=1000)
    state = section.new_state("g")
    for i in range(3):
        exchange(section, state, i)
    rendered = section.render(state)
    assert rendered.warning is None and len(rendered.blocks) == 3


def test_one_very_large_exchange_renders_its_start_and_end_within_the_budget():
    section = make_dialogue(budget=1000)
    state = section.new_state("g")
    exchange(section, state, 0)
    section.record_exchange(
        state,
        "Tell me everything",
        "A" * 5000 + " THE END",
        timestamp_us=T0 + SECOND,
        exchange_id="big",
    )
    rendered = section.render(state)
    (block,) = rendered.blocks
    assert block.timestamp_us == T0 + SECOND
    assert block.text.startswith("[2024-05-01 14:13:06 UTC] User: Tell me everything")
    assert block.text.endswith("THE END") and OMISSION_MARKER in block.text
    assert utf8_size(block.text) <= 1000
    assert rendered.warning.clipped_newest and rendered.warning.omitted_entries == 1
    assert state.entries[-1].size > 5000  # stored whole


def test_one_very_large_update_renders_its_start_and_end_within_the_budget():
    section = make_topic(budget=500)
    state = section.new_state("g")
    section.append_update(state, "Sensor dump: " + "0" * 4000 + " checksum 42", timestamp_us=T0)
    (block,) = section.render(state).blocks
    assert (
        "Sensor dump:" in block.text
        and block.text.endswith("checksum 42")
        and utf8_size(block.text) <= 500
    )


def test_other_sections_are_unaffected_by_a_section_over_its_budget():
    dialogue = make_dialogue(budget=1000)
    topic = make_topic(budget=1000)
    d_state, t_state = dialogue.new_state("g"), topic.new_state("g")
    update(topic, t_state, 0)
    update(topic, t_state, 20)
    alone = topic.render(t_state)
    for i in range(1, 15):
        exchange(dialogue, d_state, i)
    dialogue.next_compaction(d_state)
    over = dialogue.render(d_state)
    assert over.warning is not None
    assert topic.render(t_state) == alone and alone.warning is None
    merged = render_participant([over.blocks, alone.blocks])
    assert [b for b in merged if b.text.startswith("[2024-05-01 14:13:05 UTC] [sample.notes]")]
    assert merged[-1] == alone.blocks[-1]


# --- table row: a summary-topic update exceeds its topic budget ----------------------------


def test_summary_topic_update_over_its_budget_keeps_start_and_end_within_the_budget():
    section = make_topic(budget=300, kind="summary")
    state = section.new_state("g")
    section.replace_state(
        state, "Window: editor. " + "w" * 1000 + " Cursor at line 42.", timestamp_us=T0
    )
    (block,) = section.render(state).blocks
    assert utf8_size(block.text) <= 300
    assert block.text.startswith(
        "[2024-05-01 14:13:05 UTC] [sample.notes] Current state: Window: editor."
    )
    assert block.text.endswith("Cursor at line 42.") and OMISSION_MARKER in block.text
    assert section.render(state).warning is None


# --- table row: a history window still contains compacted exchanges ------------------------


def history(*indices: int) -> tuple[list[tuple[str, str, int | None]], list[str]]:
    return [(f"q{i}", f"a{i}", T0 + i * SECOND) for i in indices], [f"turn-{i}" for i in indices]


def test_reconcile_never_replays_compacted_exchanges():
    section = make_dialogue(budget=1000)
    state = section.new_state("g")
    for i in range(6):
        exchange(section, state, i)
    section.apply_result(state, ok(section.next_compaction(state)))
    assert len(state.entries) == 1
    exchanges, ids = history(0, 1, 2, 3, 4, 5)
    assert section.reconcile_history(state, exchanges, exchange_ids=ids, now_us=T0) == 0
    assert len(state.entries) == 1


def test_reconcile_adds_the_contiguous_tail_after_the_last_known_exchange():
    section = make_dialogue()
    state = section.new_state("g")
    for i in (1, 3):
        exchange(section, state, i)
    exchanges, ids = history(0, 1, 2, 3, 4, 5)
    assert section.reconcile_history(state, exchanges, exchange_ids=ids, now_us=T0) == 2
    assert [entry.timestamp_us for entry in state.entries] == [
        T0 + i * SECOND for i in (1, 3, 4, 5)
    ]
    assert section.reconcile_history(state, exchanges, exchange_ids=ids, now_us=T0) == 0


def test_reconcile_of_a_window_with_no_known_exchange_adds_it_all_once():
    section = make_dialogue()
    state = section.new_state("g")
    exchanges, ids = history(0, 1, 1, 2)
    assert section.reconcile_history(state, exchanges, exchange_ids=ids, now_us=T0) == 3


def test_reconcile_records_an_exchange_without_time_at_now():
    section = make_dialogue()
    state = section.new_state("g")
    now = T0 + 60 * SECOND
    section.reconcile_history(state, [("q", "a", None)], exchange_ids=[None], now_us=now)
    assert state.entries[0].timestamp_us == now
    assert (
        section.reconcile_history(
            state, [("q", "a", None)], exchange_ids=[None], now_us=now + SECOND
        )
        == 0
    )


def test_reconcile_requires_one_id_per_exchange():
    section = make_dialogue()
    with pytest.raises(ValueError, match="exchange_ids: must have exactly one id per exchange"):
        section.reconcile_history(
            section.new_state("g"), [("q", "a", T0)], exchange_ids=[], now_us=T0
        )


def test_reconcile_with_an_invalid_timestamp_adds_nothing():
    section = make_dialogue()
    state = section.new_state("g")
    with pytest.raises(ValueError, match="timestamp_us"):
        section.reconcile_history(
            state, [("q", "a", T0), ("q2", "a2", -5)], exchange_ids=["x", "y"], now_us=T0
        )
    assert state.entries == [] and not state.exchange_identities


def test_recording_an_exchange_whose_id_is_known_adds_nothing():
    section = make_dialogue()
    state = section.new_state("g")
    assert section.record_exchange(state, "q", "a", timestamp_us=T0, exchange_id="turn-1")
    assert not section.record_exchange(
        state, "q again", "a", timestamp_us=T0 + SECOND, exchange_id="turn-1"
    )
    assert len(state.entries) == 1


def test_exchange_without_id_is_identified_by_request_answer_and_time():
    section = make_dialogue()
    state = section.new_state("g")
    assert section.record_exchange(state, "q", "a", timestamp_us=T0, exchange_id=None)
    assert not section.record_exchange(state, "q", "a", timestamp_us=T0, exchange_id=None)
    assert section.record_exchange(state, "q", "a", timestamp_us=T0 + 1, exchange_id=None)


def test_exchange_ids_of_different_types_are_different_identities():
    section = make_dialogue()
    state = section.new_state("g")
    assert section.record_exchange(state, "q", "a", timestamp_us=T0, exchange_id=1)
    assert section.record_exchange(state, "q", "a", timestamp_us=T0, exchange_id="1")


def _history_tail_reference(known, exchanges, *, exchange_ids, now_us):
    """``history_tail`` as its docstring states it, with every identity computed."""
    window = [
        (request, answer, timestamp_us, exchange_identity(request, answer, timestamp_us, eid))
        for (request, answer, timestamp_us), eid in zip(exchanges, exchange_ids)
    ]
    known_at = [index for index, item in enumerate(window) if item[3] in known]
    tail = window[known_at[-1] + 1 :] if known_at else window
    added, seen = [], set()
    for request, answer, timestamp_us, identity in tail:
        if identity not in known and identity not in seen:
            seen.add(identity)
            added.append(
                (identity, request, answer, now_us if timestamp_us is None else timestamp_us)
            )
    return added


@settings(max_examples=300, deadline=None)
@given(
    st.lists(
        st.tuples(
            st.sampled_from(["q1", "q2", "q3"]),
            st.sampled_from(["a1", "a2"]),
            st.one_of(st.none(), st.sampled_from([T0, T0 + SECOND])),
            st.one_of(st.none(), st.sampled_from(["t1", "t2", "t3", 7])),
        ),
        max_size=8,
    ),
    st.sets(st.integers(0, 7), max_size=4),
)
def test_history_tail_scanning_from_the_newest_exchange_adds_what_the_window_rule_says(
    window, known_positions
):
    exchanges = [(request, answer, timestamp_us) for request, answer, timestamp_us, _ in window]
    ids = [eid for *_, eid in window]
    known = {
        exchange_identity(*exchanges[index], ids[index])
        for index in known_positions
        if index < len(window)
    }
    now = T0 + 60 * SECOND
    assert history_tail(known, exchanges, exchange_ids=ids, now_us=now) == (
        _history_tail_reference(known, exchanges, exchange_ids=ids, now_us=now)
    )


# --- bounded while compaction lags (issue 30, item 3) ------------------------------------


def test_a_flood_while_compaction_lags_stays_within_four_budgets_and_counts_what_it_dropped():
    section = make_topic(budget=1000)
    state = section.new_state("g")
    for i in range(6):
        update(section, state, i)
    request = section.next_compaction(state)  # in flight, and never answered meanwhile
    assert request is not None and state.pending is not None
    snapshot = set(state.pending.entry_ids)
    for i in range(6, 2006):
        update(section, state, i)
        newest = state.entries[-1].size
        assert section.uncompacted_bytes(state) - newest <= section.spec.stored_limit_bytes
    assert section.spec.stored_limit_bytes == 4000
    kept = entry_ids(state)
    assert state.dropped_entries == 2006 - len(kept) > 1900
    assert snapshot <= set(kept)  # the job in flight still finds its entries
    assert kept[-1] == 2006  # the newest update is kept: the oldest went first
    assert section.apply_result(state, ok(request, "S")) is ApplyStatus.APPLIED
    assert not snapshot & set(entry_ids(state))
    assert section.next_compaction(state) is not None  # the rest compacts as usual


def test_a_section_within_four_budgets_drops_nothing():
    section = make_dialogue(budget=1000)
    state = section.new_state("g")
    for i in range(6):
        exchange(section, state, i)
    assert section.next_compaction(state) is not None
    for i in range(6, 41):
        exchange(section, state, i)
    assert state.dropped_entries == 0 and len(state.entries) == 41
