"""Summary guards of the context engine (issue 32; docs/context.md, "Compaction").

With ``CompactionSettings.guarded`` every model summary is checked against the entries it
replaces and the previous summary (``frozen``, ``lossy``), a failing request is never sent
again unchanged, and material the model keeps failing on is compacted by the extractive
fallback, so no value of the entries leaves ``blocks()`` because a model is weak.
"""

from __future__ import annotations

import re
from collections.abc import Callable

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from xrmq.actors.context import (
    ApplyStatus,
    CompactionResult,
    CompactionSettings,
    Section,
    SectionSpec,
    SectionState,
    utf8_size,
)
from xrmq.actors.context.compaction import CompactionRequest
from xrmq.actors.context.salience import extractive_summary, salient_values, summary_problem

pytestmark = pytest.mark.timeout(60)

T0 = 1_714_572_785_000_000  # 2024-05-01 14:13:05 UTC
SECOND = 1_000_000
FILLER = "Nothing else changed in the building during that quiet interval, all calm."

EARLIER = "Boiler B2 serviced at 08:15."

Model = Callable[[CompactionRequest], CompactionResult]


def guarded_topic(budget: int = 3000) -> Section:
    return Section(
        SectionSpec("sample.notes", "incremental", budget),
        CompactionSettings((budget + 1) // 2 + 256, guarded=True),
    )


def reading(i: int) -> str:
    return f"Sensor S{i} read {100 + i} kPa. {FILLER}"


def previous_summary(request: CompactionRequest) -> str:
    found = re.search(r"<previous_summary>\n(.*)\n</previous_summary>", request.user_message, re.S)
    return found.group(1) if found else ""


def good(request: CompactionRequest) -> CompactionResult:
    """A model that keeps the values: the extractive summary of the material."""
    return CompactionResult(
        request.job, extractive_summary(request.user_message, request.limit_bytes), "stop"
    )


def frozen(request: CompactionRequest) -> CompactionResult:
    """Returns the previous summary unchanged (a good one when there is none yet)."""
    previous = previous_summary(request)
    return CompactionResult(request.job, previous, "stop") if previous else good(request)


def lossy(request: CompactionRequest) -> CompactionResult:
    return CompactionResult(
        request.job, "This material records pressure readings from building sensors.", "stop"
    )


def cut_off(request: CompactionRequest) -> CompactionResult:
    return CompactionResult(request.job, "Sensor S", "length")


class Run:
    """Drives a guarded section with one model: an entry, then every compaction due."""

    def __init__(self, section: Section, model: Model) -> None:
        self.section = section
        self.model = model
        self.state: SectionState = section.new_state("g")
        self.state.summary = EARLIER  # as an earlier compaction left it
        self.sent: list[tuple[str, str]] = []
        self.statuses: list[ApplyStatus] = []
        self.values: set[str] = set(salient_values(EARLIER))

    def add(self, i: int) -> None:
        text = reading(i)
        self.values |= salient_values(text)
        self.section.append_update(self.state, text, timestamp_us=T0 + i * SECOND)
        while (request := self.section.next_compaction(self.state)) is not None:
            self.sent.append((request.system_prompt, request.user_message))
            self.statuses.append(self.section.apply_result(self.state, self.model(request)))

    def shown(self) -> str:
        return "\n".join(block.text for block in self.section.render(self.state).blocks).lower()

    def longest_unchanged_run(self) -> int:
        longest = run = 0
        for index, request in enumerate(self.sent):
            run = run + 1 if index and request == self.sent[index - 1] else 1
            longest = max(longest, run)
        return longest


# --- the check ---------------------------------------------------------------------------


def test_salient_values_are_numbers_identifiers_times_and_names_not_bookkeeping():
    text = (
        "[2024-05-01 14:13:05 UTC] User: the budget meeting moved to room 539 with "
        "Dr Alice Brown at 10:30, work order WO-4471.\nAssistant: Noted."
    )
    assert salient_values(text) == {"539", "dr alice brown", "10:30", "wo-4471"}


def test_sequence_labels_and_padding_are_not_values_codes_and_numbers_with_units_are():
    text = "User: q3000 and v2, a0-aaaaaaaa u7-xxxx b12\nAssistant: room B12, ext-4471, 5m, 10am."
    assert salient_values(text) == {"b12", "ext-4471", "5m", "10am"}


def test_a_placeholder_summary_of_entries_with_only_labels_and_padding_is_accepted():
    entries = [
        f"[2024-05-01 14:13:0{i} UTC] User: q{i}\nAssistant: a{i}-" + "a" * 40 for i in range(5)
    ]
    assert summary_problem("recovered summary", "", entries, 250) is None
    assert summary_problem("s", "s", entries, 250) is None
    assert summary_problem("s", "", [*entries, "Badge 4471."], 250) == "lossy"


def test_previous_summary_returned_unchanged_while_entries_add_values_is_frozen():
    previous = "Meeting in room 12 at 09:00."
    assert summary_problem(previous, previous, ["Correction: meeting moved to room 539."], 500) == (
        "frozen"
    )


def test_previous_summary_with_the_new_value_merged_in_is_accepted():
    previous = "Meeting in room 12 at 09:00 with the finance team of the northern office."
    merged = "Meeting in room 539 at 09:00 with the finance team of the northern office."
    assert (
        summary_problem(merged, previous, ["Correction: meeting moved to room 539."], 500) is None
    )


def test_summary_without_the_entries_values_is_lossy():
    entries = ["Sensor S1 read 101 kPa.", "Sensor S2 read 102 kPa."]
    assert summary_problem("The material records sensor readings.", "", entries, 500) == "lossy"
    assert summary_problem("S1 read 101 kPa.", "", [*entries, "Door D7 at 10:30."], 500) == "lossy"
    assert summary_problem("S1 101, S2 102.", "", entries, 500) is None


def test_a_summary_that_keeps_the_new_values_and_drops_the_previous_summary_s_is_lossy():
    previous = "Work order EQ-3768-X9.\nDesk extension 6638.\nTutor Lucia Okafor."
    entries = ["User: My seat number is 6320."]
    assert summary_problem("subject: seat number 6320", previous, entries, 500) == "lossy"
    kept = "work order: EQ-3768-X9\ndesk extension: 6638\ntutor: Lucia Okafor\nseat: 6320"
    assert summary_problem(kept, previous, entries, 500) is None


def test_a_summary_that_drops_the_newest_reading_is_lossy_though_it_keeps_the_rest():
    previous = "Server rack B reads 88.4 C.\nThe tripod was moved to bay 10.\nPrinter in bay 21."
    entries = ["[notes] Aquarium reads 88.0 C."]
    stale = "Readings: rack B at 88.4 C. Locations: tripod in bay 10, label printer in bay 21."
    assert summary_problem(stale, previous, entries, 500) == "lossy"
    assert summary_problem(stale + " Aquarium at 88.0 C.", previous, entries, 500) is None


def test_an_old_value_goes_only_for_a_new_value_of_its_kind():
    # The 1.5B run's call 15: the booking reference went to make room for a room number, a
    # bay and a name, inside the allowance of one old value while new ones come.
    previous = (
        "work order: EQ-3768-X9\nbudget meeting: room 879\nyoga class: 15:20\n"
        "desk extension: 6638\nThe booking reference is RV-1856-X8."
    )
    entries = [
        "User: The board game night is in room 624.\nAssistant: Noted.",
        "User: My tutor is called Lucia Okafor.\nAssistant: Got it.",
    ]
    kept = previous.replace("\nThe booking reference is RV-1856-X8.", "")
    new = "\nboard game night: room 624\ntutor: Lucia Okafor"
    assert summary_problem(kept + new, previous, entries, 600) == "lossy"
    assert summary_problem(previous + new, previous, entries, 600) is None
    # A correction replaces a value with one of its kind: room 879 -> room 539.
    corrected = previous.replace("room 879", "room 539")
    moved = ["User: Actually, the budget meeting moved to room 539.\nAssistant: Thanks."]
    assert summary_problem(corrected, previous, moved, 600) is None


def test_stale_readings_kept_do_not_make_up_for_the_current_one_dropped():
    # The 1.5B run's call 7: every aquarium reading but the newest, which answers.
    entries = [f"[notes] Aquarium reads {value} C." for value in ("64.7", "10.6", "81.9", "69.6")]
    entries.append("[notes] Server rack b thermometer reads 1.5 C.")
    stale = "Aquarium readings of 64.7 C, 10.6 C and 81.9 C. Server rack b reading 1.5 C."
    assert summary_problem(stale, "", entries, 500) == "lossy"
    current = "Aquarium reads 69.6 C. Server rack b thermometer reads 1.5 C."
    assert summary_problem(current, "", entries, 500) is None
    assert summary_problem(stale + " Aquarium now 69.6 C.", "", entries, 500) is None


def test_a_summary_is_held_to_the_values_that_fit_its_limit():
    entries = [f"Sensor S{i} read {100 + i} kPa." for i in range(10)]
    assert summary_problem("Sensor S3 read 103 kPa.", "", entries, 30) is None
    assert summary_problem("Sensors read pressures.", "", entries, 30) == "lossy"


def test_entries_without_values_never_fail_a_summary():
    assert (
        summary_problem("Chatted about the weather.", "", ["hello there", "how are you"], 500)
        is None
    )


# --- the engine --------------------------------------------------------------------------


def test_a_good_summary_is_accepted_and_recorded_as_made_by_the_model():
    run = Run(guarded_topic(), good)
    for i in range(14):
        run.add(i)
    assert ApplyStatus.APPLIED in run.statuses
    assert set(run.statuses) == {ApplyStatus.APPLIED}
    assert run.state.summary_by == "model"
    assert run.state.fallbacks == run.state.frozen_summaries == run.state.lossy_summaries == 0


@pytest.mark.parametrize(
    ("model", "counter"),
    [(frozen, "frozen_summaries"), (lossy, "lossy_summaries"), (cut_off, None)],
    ids=["frozen", "lossy", "cut-off"],
)
def test_a_weak_model_loses_no_value_uses_the_counted_fallback_and_never_resends_unchanged(
    model: Model, counter: str | None
):
    run = Run(guarded_topic(), model)
    for i in range(14):
        run.add(i)
        missing = {value for value in run.values if value not in run.shown()}
        assert not missing, f"after entry {i}"
    assert run.state.fallbacks >= 1
    assert run.state.summary_by == "extractive"
    assert ApplyStatus.FALLBACK in run.statuses
    if counter is not None:
        assert getattr(run.state, counter) >= 1
        assert ApplyStatus.REJECTED in run.statuses
    assert run.longest_unchanged_run() <= 2
    assert len(run.sent) == len(set(run.sent))  # in fact, never sent twice at all


def over_long(request: CompactionRequest) -> CompactionResult:
    """A compact summary that keeps every value but is over the limit (a condense due),
    the values spread through it (a clip keeping its start and end loses the middle's)."""
    readings = re.findall(r"Sensor S\d+ read \d+ kPa\.", request.user_message)
    text = " ".join(f"{reading} {FILLER}" for reading in readings)
    return CompactionResult(request.job, text, "stop")


def condense_setup() -> tuple[Section, SectionState, str]:
    section = guarded_topic(budget=2000)  # summary limit 500
    state = section.new_state("g")
    i = 0
    while (request := section.next_compaction(state)) is None:
        section.append_update(state, reading(i), timestamp_us=T0 + i * SECOND)
        i += 1
    long_summary = over_long(request).text
    status = section.apply_result(state, CompactionResult(request.job, long_summary, "stop"))
    assert status is ApplyStatus.CONDENSE_DUE
    return section, state, long_summary


@pytest.mark.parametrize(
    "condensed",
    [
        "Sensor readings were recorded; all calm.",
        "",
    ],
    ids=["values-dropped", "failed-and-clipped"],
)
def test_a_condense_that_drops_the_summary_s_values_is_replaced_by_the_extractive_summary(
    condensed: str,
):
    section, state, long_summary = condense_setup()
    request = section.next_compaction(state)
    assert request is not None and request.kind == "condense"
    result = CompactionResult(request.job, condensed, "stop" if condensed else "length")
    status = section.apply_result(state, result)
    assert status is ApplyStatus.FALLBACK
    assert state.lossy_summaries == 1 and state.fallbacks == 1
    assert state.summary_by == "extractive"
    assert utf8_size(state.summary) <= section.spec.summary_limit_bytes
    kept = extractive_summary(long_summary, section.spec.summary_limit_bytes)
    assert state.summary == kept
    values = salient_values(kept)
    assert values and all(value in state.summary.lower() for value in values)
    assert section.next_compaction(state) is None  # the compacted entries are gone


def test_a_condense_that_keeps_the_values_is_applied_as_the_model_s_summary():
    section, state, long_summary = condense_setup()
    request = section.next_compaction(state)
    assert request is not None and request.kind == "condense"
    short = " ".join(re.findall(r"Sensor S\d+ read \d+ kPa\.", long_summary))
    assert utf8_size(short) <= section.spec.summary_limit_bytes
    status = section.apply_result(state, CompactionResult(request.job, short, "stop"))
    assert status is ApplyStatus.APPLIED
    assert state.summary == short and state.summary_by == "model"
    assert state.lossy_summaries == state.fallbacks == 0


def test_the_retry_after_the_next_entry_is_a_smaller_batch_when_it_would_be_unchanged():
    section = guarded_topic()
    state = section.new_state("g")
    for i in range(11):
        section.append_update(state, reading(i), timestamp_us=T0 + i * SECOND)
    first = section.next_compaction(state)
    assert first is not None
    taken = len(state.pending.entry_ids)
    assert section.apply_result(state, cut_off(first)) is ApplyStatus.FAILED
    assert section.next_compaction(state) is None  # the seed: after the next entry
    # An entry with an older time joins after the batch's budget: the same batch again.
    section.append_update(state, "late note", timestamp_us=T0 + 99 * SECOND)
    retry = section.next_compaction(state)
    assert retry is not None and retry.user_message != first.user_message
    assert len(state.pending.entry_ids) < taken or state.pending.entry_ids[-1] not in range(
        1, taken + 1
    )
    # The second failure asks at once for a smaller batch; the third uses the fallback.
    second_ids = state.pending.entry_ids
    assert section.apply_result(state, cut_off(retry)) is ApplyStatus.FAILED
    smaller = section.next_compaction(state)
    assert smaller is not None and len(state.pending.entry_ids) < len(second_ids)
    assert section.apply_result(state, cut_off(smaller)) is ApplyStatus.FALLBACK
    assert state.summary_by == "extractive" and state.fallbacks == 1


def test_repeated_fallbacks_back_off_the_model():
    run = Run(guarded_topic(budget=1200), cut_off)
    for i in range(80):
        run.add(i)
    model_made = len(run.sent)
    assert run.state.fallbacks > 0
    assert run.state.model_skips > 0 or run.state.fallback_streak >= 3
    # Backing off: fewer model requests than three per compacted batch.
    assert model_made < 3 * run.state.fallbacks


OUTCOMES = st.sampled_from(["good", "frozen", "lossy", "cut_off", "error", "over"])


@settings(max_examples=150, deadline=None)
@given(
    budget=st.integers(400, 3000),
    outcomes=st.lists(OUTCOMES, min_size=1, max_size=60),
    sizes=st.lists(st.integers(0, 300), min_size=1, max_size=60),
)
def test_guarded_sections_keep_their_limits_and_never_resend_a_request_unchanged(
    budget, outcomes, sizes
):
    section = guarded_topic(budget)
    state = section.new_state("g")
    state.summary = EARLIER
    models: dict[str, Model] = {
        "good": good,
        "frozen": frozen,
        "lossy": lossy,
        "cut_off": cut_off,
        "error": lambda request: CompactionResult(request.job, error="model down"),
        "over": lambda request: CompactionResult(request.job, "x " * request.limit_bytes, "stop"),
    }
    sent: list[str] = []
    for i, size in enumerate(sizes):
        section.append_update(
            state, f"Sensor S{i} read {i} kPa. " + "z" * size, timestamp_us=T0 + i * SECOND
        )
        step = 0
        while (request := section.next_compaction(state)) is not None:
            if request.kind == "compact":
                assert not sent or request.user_message != sent[-1], "resent unchanged"
                sent.append(request.user_message)
            outcome = outcomes[(i + step) % len(outcomes)]
            section.apply_result(state, models[outcome](request))
            step += 1
        assert utf8_size(state.summary) <= section.spec.summary_limit_bytes
        assert state.summary_by in ("", "model", "extractive")
        assert sum(utf8_size(b.text) for b in section.render(state).blocks) <= budget
        assert state.failures < 3 and 0 <= state.model_skips <= 8
