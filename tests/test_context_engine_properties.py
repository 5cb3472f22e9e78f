"""Property tests of the context engine over random operation sequences.

A sequence interleaves entries (random sizes, multi-byte text, out-of-order times) and
results of every kind (within the limit, over it, empty, cut off, failed, and results
for jobs that are no longer pending); after each step, as an actor does, it asks for
the next compaction request. After every step the
section must hold exactly the entries no applied snapshot covered, render within its
budget with its newest entry shown, and keep every request within its input budget.
"""

from __future__ import annotations

import msgspec
from hypothesis import given, settings
from hypothesis import strategies as st

from xrmq.actors.context import (
    OMISSION_MARKER,
    ApplyStatus,
    CompactionResult,
    CompactionSettings,
    Section,
    SectionSpec,
    clip_middle,
    utf8_size,
)
from xrmq.actors.context.compaction import compact_message
from xrmq.actors.context.state import min_input_budget

T0 = 1_714_572_785_000_000
ALPHABET = st.sampled_from("abc xyz.\né€日本🙂")  # 1- to 4-byte characters, no "[" (the marker's)
TEXT = st.text(ALPHABET, max_size=60).map(lambda s: s * 4)
PROPERTY_SETTINGS = settings(max_examples=120, deadline=None)

add_op = st.tuples(st.just("add"), TEXT, st.integers(0, 600))
result_op = st.tuples(
    st.just("result"),
    st.sampled_from(["within", "over", "empty", "length", "error"]),
    st.sampled_from(["current", "older"]),
)
OPERATIONS = st.lists(st.one_of(add_op, add_op, add_op, result_op), max_size=80)


@st.composite
def sections(draw) -> Section:
    kind = draw(st.sampled_from(["dialogue", "incremental"]))
    budget = draw(st.integers(200, 1_500))
    input_budget = min_input_budget(budget) + draw(st.integers(0, 300))
    return Section(
        SectionSpec("dialogue" if kind == "dialogue" else "sample.notes", kind, budget),
        CompactionSettings(input_budget),
    )


def add(section: Section, state, text: str, offset_s: int, counter: int) -> None:
    timestamp = T0 + offset_s * 1_000_000
    if section.spec.kind == "dialogue":
        section.record_exchange(
            state, f"q{counter}", text, timestamp_us=timestamp, exchange_id=counter
        )
    else:
        section.append_update(state, text, timestamp_us=timestamp)


def result_for(request, outcome: str) -> CompactionResult:
    limit = request.limit_bytes
    if outcome == "within":
        return CompactionResult(request.job, "é" * (limit // 2), finish_reason="stop")
    if outcome == "over":
        return CompactionResult(
            request.job, "start " + "o" * (2 * limit) + " end", finish_reason="stop"
        )
    if outcome == "empty":
        return CompactionResult(request.job, "", finish_reason="stop")
    if outcome == "length":
        return CompactionResult(request.job, "cut", finish_reason="length")
    return CompactionResult(request.job, error="model failed")


def material_bytes(request, summary: str, texts_count: int) -> int:
    """Bytes of previous summary plus entries in a compact request (delimiters excluded)."""
    overhead = utf8_size(compact_message(summary, [""] * texts_count)) - utf8_size(summary)
    return utf8_size(request.user_message) - overhead


def check_rendering(section: Section, state) -> None:
    rendered = section.render(state)
    assert sum(utf8_size(block.text) for block in rendered.blocks) <= section.spec.budget_bytes
    dated = [block for block in rendered.blocks if block.timestamp_us is not None]
    if not state.entries:
        assert dated == [] and rendered.warning is None
        return
    # The newest entries are shown, oldest left out first; only a lone newest is clipped.
    assert dated, "the newest entry is always shown"
    tail = state.entries[len(state.entries) - len(dated) :]
    if len(dated) == 1 and dated[0].text != tail[0].text:
        assert OMISSION_MARKER in dated[0].text
        assert rendered.warning is not None and rendered.warning.clipped_newest
    else:
        assert [block.text for block in dated] == [entry.text for entry in tail]
    assert (rendered.warning is None) == (
        len(dated) == len(state.entries) and dated[0].text == state.entries[0].text
    )


@PROPERTY_SETTINGS
@given(section=sections(), operations=OPERATIONS)
def test_random_operations_keep_entries_budgets_and_snapshots_consistent(section, operations):
    state = section.new_state("g")
    alive: set[int] = set()
    issued: list = []
    for counter, operation in enumerate(operations):
        if operation[0] == "add":
            dropped = state.dropped_entries
            add(section, state, operation[1], operation[2], counter)
            alive.add(state.next_entry_id - 1)
            # The stored limit drops (and counts) only entries no job holds, oldest first.
            gone = alive - {entry.entry_id for entry in state.entries}
            assert len(gone) == state.dropped_entries - dropped
            held = set(state.pending.entry_ids) if state.pending is not None else set()
            assert not gone & held
            alive -= gone
            over = section.uncompacted_bytes(state) - state.entries[-1].size
            if over > section.spec.stored_limit_bytes:
                assert all(entry.entry_id in held for entry in state.entries[:-1])
        elif issued:
            _, outcome, which = operation
            request = issued[-1] if which == "current" else issued[0]
            pending = state.pending
            before = msgspec.msgpack.encode(state)
            status = section.apply_result(state, result_for(request, outcome))
            if pending is None or pending.request != request:
                assert status is ApplyStatus.STALE
                assert msgspec.msgpack.encode(state) == before
            elif status in (ApplyStatus.APPLIED, ApplyStatus.CLIPPED, ApplyStatus.FALLBACK):
                alive -= set(pending.entry_ids)  # FALLBACK: the batch compacted extractively
        summary_before, fallbacks_before = state.summary, state.fallbacks
        request = section.next_compaction(state)
        # Guarded (the default), a model that failed the same material, or one backed off,
        # makes the engine compact a batch itself with the extractive fallback: the only
        # way entries leave without a result, and it is counted.
        vanished = alive - {entry.entry_id for entry in state.entries}
        if vanished:
            assert state.fallbacks > fallbacks_before and state.summary_by == "extractive"
            alive -= vanished
        if state.fallbacks > fallbacks_before:
            summary_before = state.summary  # what the request issued after it carries
        if request is not None:
            issued.append(request)
            snapshot = state.pending.entry_ids
            assert set(snapshot) <= alive
            if request.kind == "compact":
                assert (
                    material_bytes(request, summary_before, len(snapshot))
                    <= section.settings.input_budget_bytes
                )
                if section.spec.kind == "dialogue":
                    assert state.entries[-1].entry_id not in snapshot  # newest stays verbatim
        assert {entry.entry_id for entry in state.entries} == alive
        assert utf8_size(state.summary) <= section.spec.summary_limit_bytes
        assert [(e.timestamp_us, e.entry_id) for e in state.entries] == sorted(
            (e.timestamp_us, e.entry_id) for e in state.entries
        )
        check_rendering(section, state)


@PROPERTY_SETTINGS
@given(
    section=sections(),
    before=st.lists(st.tuples(TEXT, st.integers(0, 600)), min_size=1, max_size=30),
    during=st.lists(st.tuples(TEXT, st.integers(0, 600)), min_size=1, max_size=10),
    outcome=st.sampled_from(["within", "over"]),
)
def test_entries_added_during_an_in_flight_compaction_survive_it_or_are_counted_dropped(
    section, before, during, outcome
):
    state = section.new_state("g")
    for counter, (text, offset) in enumerate(before):
        add(section, state, text, offset, counter)
    request = section.next_compaction(state)
    while request is None:  # grow the backlog until the trigger fires
        add(section, state, "filler " * 40, 601, len(state.entries) + 1000)
        request = section.next_compaction(state)
    first_new, dropped_before = state.next_entry_id, state.dropped_entries
    for counter, (text, offset) in enumerate(during):
        add(section, state, text, offset, 10_000 + counter)
    added_during = set(range(first_new, state.next_entry_id))
    status = section.apply_result(state, result_for(request, outcome))
    if status is ApplyStatus.CONDENSE_DUE:
        condense = section.next_compaction(state)
        status = section.apply_result(state, result_for(condense, "length"))
    assert status in (ApplyStatus.APPLIED, ApplyStatus.CLIPPED)
    # Each survives, unless the section's stored limit dropped it, and then it is counted.
    missing = added_during - {entry.entry_id for entry in state.entries}
    assert len(missing) <= state.dropped_entries - dropped_before


@PROPERTY_SETTINGS
@given(
    section=sections(),
    texts=st.lists(TEXT, min_size=6, max_size=30),
    generation=st.text(min_size=1, max_size=8),
)
def test_a_result_whose_snapshot_no_longer_matches_is_discarded(section, texts, generation):
    old = section.new_state(generation)
    for counter, text in enumerate(texts):
        add(section, old, text * 3, counter, counter)
    request = section.next_compaction(old)
    if request is None:
        return
    fresh = section.new_state(generation + "'")  # cleared and recreated with the same history
    for counter, text in enumerate(texts):
        add(section, fresh, text * 3, counter, counter)
    section.next_compaction(fresh)
    before = msgspec.msgpack.encode(fresh)
    assert section.apply_result(fresh, result_for(request, "within")) is ApplyStatus.STALE
    assert msgspec.msgpack.encode(fresh) == before


@PROPERTY_SETTINGS
@given(text=st.text(ALPHABET, max_size=200), state_budget=st.integers(1, 400))
def test_summary_topic_state_never_exceeds_its_budget(text, state_budget):
    section = Section(
        SectionSpec("w", "summary", state_budget),
        CompactionSettings(min_input_budget(state_budget)),
    )
    state = section.new_state("g")
    section.replace_state(state, text, timestamp_us=T0)
    assert sum(utf8_size(block.text) for block in section.render(state).blocks) <= state_budget


@settings(max_examples=300, deadline=None)
@given(text=st.text(ALPHABET, max_size=200), limit=st.integers(0, 300))
def test_clipping_never_exceeds_the_limit_or_splits_a_character(text, limit):
    clipped = clip_middle(text, limit)
    assert utf8_size(clipped) <= limit
    if utf8_size(text) <= limit:
        assert clipped == text
    elif OMISSION_MARKER in clipped:
        head, tail = clipped.split(OMISSION_MARKER, 1)
        assert text.startswith(head) and text.endswith(tail)
        assert len(head) + len(tail) < len(text)  # whole characters of the start and the end
    else:
        assert text.startswith(clipped) and limit <= utf8_size(OMISSION_MARKER)
