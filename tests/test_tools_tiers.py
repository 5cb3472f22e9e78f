"""docs/tools.md's tier rules as tests of the pure tier logic (tiers, transcript, policy)."""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from xrmq.actors.tools.policy import (
    ESCALATION_RATIO,
    TOKEN_THRESHOLD,
    AutoCompactor,
    Compacting,
    CompactorAbstract,
)
from xrmq.actors.tools.tiers import (
    PLACEHOLDER,
    SUMMARY_KEEP_MAX,
    TOOLCALL_KEEP_MAX,
    SummaryStatus,
    ToolCallCompactResult,
    compact_toolcall,
    estimated_message_length,
    placeholder,
    plan_summary,
    summary_cut,
)
from xrmq.actors.tools.transcript import Transcript, UnknownToolCall

LONG = "x" * 400


def user(text: str = "question") -> Any:
    return {"role": "user", "content": text}


def answer(text: str) -> Any:
    return {"role": "assistant", "content": text}


def calls(*call_ids: str, arguments: str = "{}") -> Any:
    """An assistant message asking for ``call_ids`` (OpenAI's shape: argument strings)."""
    return {
        "role": "assistant",
        "content": None,
        "tool_calls": [
            {"id": i, "type": "function", "function": {"name": "probe", "arguments": arguments}}
            for i in call_ids
        ],
    }


def call(call_id: str) -> Any:
    return calls(call_id)


def result(call_id: str, content: str = LONG) -> Any:
    return {"role": "tool", "tool_call_id": call_id, "content": content}


def append(transcript: Transcript, *messages: Any) -> None:
    """Add messages to the transcript's current turn (pending until it commits)."""
    transcript.conversation.messages.extend(messages)


def call_ids(message: Any) -> set[str]:
    return {c["id"] for c in message.get("tool_calls") or ()}


def rounds(count: int, content: str = LONG) -> list[Any]:
    """``count`` tool rounds (assistant call, tool result) after one user message."""
    messages = [user()]
    for index in range(count):
        messages += [call(f"c{index}"), result(f"c{index}", content)]
    return messages


def test_the_defaults_are_the_seeds() -> None:
    compactor = AutoCompactor()
    assert (TOOLCALL_KEEP_MAX, SUMMARY_KEEP_MAX, ESCALATION_RATIO, TOKEN_THRESHOLD) == (
        12,
        16,
        0.95,
        192_000,
    )
    assert (
        compactor.toolcall_keep_max,
        compactor.summary_keep_max,
        compactor.escalation_rounds,
        compactor.max_retries,
        compactor.token_threshold,
        compactor.enabled,
    ) == (12, 16, 2, 2, 192_000, True)
    assert placeholder("call_7") == (
        "[Compacted, ID: call_7. If this content is still needed, call "
        "extract_compacted_tool_result "
        "with this ID or re-run the tool.]"
    )
    assert PLACEHOLDER.format(toolcall_id="z") == placeholder("z")


def test_tier1_keeps_the_most_recent_keep_max_results_and_reclaims_older_ones() -> None:
    messages = rounds(15)
    done = compact_toolcall(messages, keep_max=12)
    tool_contents = [m["content"] for m in done.messages if m["role"] == "tool"]
    assert tool_contents[:3] == [placeholder("c0"), placeholder("c1"), placeholder("c2")]
    assert tool_contents[3:] == [LONG] * 12
    assert done.originals == {"c0": LONG, "c1": LONG, "c2": LONG}
    assert done.result.reclaimed_count == 3
    before, after = estimated_message_length(messages), estimated_message_length(done.messages)
    assert done.result.reclaimed_fraction == pytest.approx((before - after) / before)
    # In place: same roles, same calls, same order.
    assert [m["role"] for m in done.messages] == [m["role"] for m in messages]
    assert [m.get("tool_call_id") for m in done.messages] == [
        m.get("tool_call_id") for m in messages
    ]


def test_tier1_replaces_a_result_only_when_the_placeholder_is_shorter() -> None:
    short = "22 C"
    exact = "y" * len(placeholder("c1"))
    messages = [
        user(),
        call("c0"),
        result("c0", short),
        call("c1"),
        result("c1", exact),
        call("c2"),
        result("c2", LONG),
        call("c3"),
        result("c3"),
    ]
    done = compact_toolcall(messages, keep_max=1)
    assert [m["content"] for m in done.messages if m["role"] == "tool"] == [
        short,
        exact,
        placeholder("c2"),
        LONG,
    ]
    assert done.result == ToolCallCompactResult(1, done.result.reclaimed_fraction)
    # A second round reclaims nothing: a placeholder is never replaced by itself.
    again = compact_toolcall(done.messages, keep_max=1)
    assert again.result.reclaimed_count == 0 and again.result.reclaimed_fraction == 0.0


def test_estimated_message_length_counts_content_and_reasoning_not_arguments() -> None:
    message: Any = {
        **calls("c", arguments='{"long": "' + "z" * 99 + '"}'),
        "content": "abc",
        "reasoning_content": "think",
    }
    assert estimated_message_length(message) == 8
    assert estimated_message_length([message, user("12")]) == 10


def test_summary_cut_never_leaves_the_tail_starting_with_an_orphaned_tool_result() -> None:
    # An assistant with three parallel calls, then their results: a naive cut lands inside them.
    messages = [
        user("old"),
        calls(*(f"p{i}" for i in range(3))),
        *(result(f"p{i}") for i in range(3)),
        answer("done"),
        user("next"),
        call("q"),
        result("q"),
        answer("ok"),
    ]
    for keep in range(len(messages) + 1):
        plan = plan_summary(messages, keep)
        if plan is None:
            continue
        assert plan.tail[0]["role"] != "tool", keep
        kept_calls = set().union(*(call_ids(m) for m in plan.tail))
        assert all(m.get("tool_call_id") in kept_calls for m in plan.tail if m["role"] == "tool"), (
            keep
        )


@st.composite
def transcripts(draw: st.DrawFn) -> list[Any]:
    """Well-formed tool-calling transcripts: turns of a user message, tool rounds (an
    assistant message with 1-3 parallel calls, then their results) and maybe an answer."""
    messages: list[Any] = []
    ids = iter(range(10_000))
    for _ in range(draw(st.integers(1, 5))):
        messages.append(user(f"turn {len(messages)}"))
        for _ in range(draw(st.integers(0, 6))):
            ids_ = [f"c{next(ids)}" for _ in range(draw(st.integers(1, 3)))]
            messages.append(calls(*ids_))
            messages += [result(c) for c in ids_]
        if draw(st.booleans()):
            messages.append(answer("answer"))
    return messages


@settings(max_examples=300, deadline=None)
@given(transcripts(), st.integers(0, 40))
def test_no_cut_leaves_an_orphaned_tool_result_and_the_last_user_message_is_kept(
    messages: list[Any], keep: int
) -> None:
    plan = plan_summary(messages, keep)
    if plan is None:
        return
    assert plan.head + plan.tail[int(plan.kept_user) :] == tuple(messages)
    assert plan.tail and plan.tail[0]["role"] != "tool"
    kept_calls = set().union(*(call_ids(m) for m in plan.tail))
    assert all(m.get("tool_call_id") in kept_calls for m in plan.tail if m["role"] == "tool")
    last_user = [m for m in messages if m["role"] == "user"][-1]
    assert last_user in plan.tail


@settings(max_examples=200, deadline=None)
@given(transcripts(), transcripts(), st.integers(0, 40))
def test_a_summary_during_a_turn_keeps_the_turn_pending_and_no_tail_starts_with_a_result(
    earlier: list[Any], turn: list[Any], keep: int
) -> None:
    current = turn[: next((i for i, m in enumerate(turn) if m["role"] == "user" and i), len(turn))]
    transcript = Transcript()
    append(transcript, *earlier)
    transcript.commit()
    append(transcript, *current)  # one turn in progress: its user message, then its steps
    plan = transcript.plan_summary(keep)
    outcome = transcript.apply_summary(plan, "the summary")
    kept = transcript.all_messages()
    if plan is None:
        assert outcome.status is SummaryStatus.NOTHING_TO_CONDENSE
        return
    assert kept and kept[0]["role"] != "tool"
    # The cut is never before the turn's user message: every earlier turn is summarized,
    # and what stays is the turn's, pending, led by its user message.
    assert transcript.messages == [] and transcript.pending == list(plan.tail)
    assert transcript.pending[0] == current[0]
    assert all(m in current for m in transcript.pending)


def test_a_pending_turn_is_summarized_inside_the_turn() -> None:
    """docs/tools.md checks "before each step": one long turn's own earlier tool rounds
    are summarized while it runs, its user message kept at the tail's start, and what
    stays keeps its place (committed before, pending after)."""
    transcript = Transcript()
    append(transcript, user("earlier"), answer("fine"))
    transcript.commit()
    append(transcript, *rounds(20))  # the turn in progress: a user message, 40 tool messages
    plan = transcript.plan_summary(16)
    assert plan is not None and plan.kept_user and len(plan.head) == 2 + 25
    outcome = transcript.apply_summary(plan, "the summary")
    assert outcome.status is SummaryStatus.COMPACTED
    assert transcript.messages == [] and transcript.pending[0] == user()
    assert len(transcript.pending) == 17 and transcript.pending[1]["role"] == "assistant"
    transcript.commit()
    assert len(transcript.messages) == 17 and transcript.summary == "the summary"


def test_a_short_turn_in_progress_is_kept_whole_and_the_earlier_turns_summarized() -> None:
    transcript = Transcript()
    append(transcript, *rounds(20))
    transcript.commit()
    append(transcript, user("now"), call("n"))
    plan = transcript.plan_summary(4)
    assert plan is not None and not plan.kept_user and len(plan.head) == 41
    transcript.apply_summary(plan, "the summary")
    assert transcript.messages == [] and transcript.pending == [user("now"), call("n")]


def test_summary_cut_is_at_the_last_user_message_when_its_tail_fits() -> None:
    messages = [*rounds(3), user("latest"), call("z"), result("z")]
    assert summary_cut(messages, 16) == 7
    plan = plan_summary(messages, 16)
    assert plan is not None and plan.tail[0] == user("latest") and not plan.kept_user


def test_the_last_user_message_is_kept_in_the_tail_when_the_cut_passes_it() -> None:
    messages = rounds(20)  # one user message, then 40 tool-round messages
    plan = plan_summary(messages, 16)
    assert plan is not None and plan.kept_user
    assert plan.tail[0] == messages[0] and plan.tail[1]["role"] == "assistant"
    assert len(plan.tail) == 17 and plan.cut_tail_length == 16


def test_nothing_to_condense_leaves_the_transcript_untouched() -> None:
    transcript = Transcript()
    append(transcript, user(), call("a"), result("a"))
    transcript.commit()
    before = list(transcript.messages)
    plan = transcript.plan_summary(16)
    assert plan is None
    outcome = transcript.apply_summary(plan, "never asked")
    assert outcome.status is SummaryStatus.NOTHING_TO_CONDENSE
    assert transcript.messages == before and transcript.summary is None
    assert transcript.counters.nothing_to_condense == 1


def test_summarize_failed_leaves_the_transcript_and_the_token_count_untouched() -> None:
    transcript = Transcript()
    append(transcript, *rounds(20))
    transcript.commit()
    transcript.note_usage(250_000)
    before = list(transcript.messages)
    for failed in (None, "   "):
        outcome = transcript.apply_summary(transcript.plan_summary(16), failed)
        assert outcome.status is SummaryStatus.SUMMARIZE_FAILED
    assert (
        transcript.messages == before
        and transcript.total_tokens == 250_000
        and transcript.summary is None
    )
    assert transcript.counters.summarize_failed == 2


def test_a_summary_replaces_the_head_and_resets_the_token_count_and_tool_rounds() -> None:
    transcript = Transcript()
    append(transcript, *rounds(20))
    transcript.commit()
    transcript.note_usage(250_000)
    transcript.compact_toolcall(12)
    assert transcript.counters.tool_rounds == 1
    before = estimated_message_length(transcript.messages)
    plan = transcript.plan_summary(16)
    assert plan is not None
    outcome = transcript.apply_summary(plan, "the summary")
    after = estimated_message_length(plan.tail) + len("the summary")
    assert outcome.status is SummaryStatus.COMPACTED
    assert outcome.reclaimed_fraction == pytest.approx((before - after) / before)
    assert transcript.summary == "the summary" and len(transcript.messages) == 17
    assert (
        transcript.messages[0]["role"] == "user" and transcript.messages[1]["role"] == "assistant"
    )
    assert transcript.total_tokens is None
    assert (transcript.counters.tool_rounds, transcript.counters.summary_rounds) == (0, 1)


def test_extract_returns_a_reclaimed_original_and_rejects_unknown_ids() -> None:
    transcript = Transcript()
    append(transcript, *rounds(14, "reading 41.7 kPa " * 20))
    transcript.commit()
    assert transcript.compact_toolcall(12).reclaimed_count == 2
    assert transcript.extract("c0") == "reading 41.7 kPa " * 20
    with pytest.raises(UnknownToolCall):
        transcript.extract("c13")


def test_originals_are_bounded_oldest_first_and_counted() -> None:
    transcript = Transcript(originals_budget_chars=1000)
    append(transcript, *rounds(20))
    transcript.commit()
    transcript.compact_toolcall(0)  # reclaims 20 x 400 chars; only 2 originals fit
    assert transcript.originals_count == 2 and transcript.counters.originals_evicted == 18
    assert transcript.extract("c19") == LONG
    with pytest.raises(UnknownToolCall):
        transcript.extract("c0")


def test_a_rolled_back_turn_leaves_no_message() -> None:
    transcript = Transcript()
    append(transcript, user("kept"), answer("yes"))
    transcript.commit()
    append(transcript, user("cancelled"), call("a"), result("a"))
    assert len(transcript.all_messages()) == 5
    transcript.rollback()
    assert transcript.all_messages() == [user("kept"), answer("yes")]


# ---------------------------------------------------------------- the policy


class Summarizer:
    def __init__(self, *replies: str | None) -> None:
        self.replies = list(replies)
        self.calls: list[tuple[int, str | None]] = []

    async def __call__(self, head: tuple[Any, ...], previous: str | None) -> str | None:
        self.calls.append((len(head), previous))
        return self.replies.pop(0) if self.replies else "summary"


def filled(count: int = 40, tokens: int | None = 250_000) -> Transcript:
    transcript = Transcript()
    append(transcript, *rounds(count))
    transcript.commit()
    transcript.note_usage(tokens)
    return transcript


async def test_no_compaction_while_under_threshold_or_usage_unknown_or_disabled() -> None:
    summarize = Summarizer()
    assert await AutoCompactor().auto_compact(Compacting(filled(tokens=192_000), summarize)) is None
    # Without a usage report the transcript's size does not count, however large it is.
    huge = filled(400, tokens=None)
    assert estimated_message_length(huge.messages) > 4 * TOKEN_THRESHOLD // 10
    assert await AutoCompactor(token_threshold=10).auto_compact(Compacting(huge, summarize)) is None
    assert await AutoCompactor(enabled=False).auto_compact(Compacting(filled(), summarize)) is None
    assert summarize.calls == []


async def test_a_sufficient_first_tier1_round_does_not_escalate_and_resets_the_trigger() -> None:
    transcript, summarize = filled(40, tokens=200_000), Summarizer()
    report = await AutoCompactor().auto_compact(Compacting(transcript, summarize))
    assert report is not None and report.outcome is SummaryStatus.COMPACTED
    assert [type(step) for step in report.steps] == [ToolCallCompactResult]
    assert summarize.calls == [] and transcript.counters.tool_rounds == 1
    assert transcript.total_tokens is None  # the stale count does not fire again
    assert not AutoCompactor().due(transcript)


async def test_escalation_after_escalation_rounds_consecutive_tier1_rounds() -> None:
    transcript, summarize, compactor = filled(40, tokens=200_000), Summarizer(), AutoCompactor()
    await compactor.auto_compact(Compacting(transcript, summarize))
    assert summarize.calls == []
    append(transcript, *(m for i in range(40, 60) for m in (call(f"c{i}"), result(f"c{i}"))))
    transcript.commit()
    transcript.note_usage(200_000)
    report = await compactor.auto_compact(Compacting(transcript, summarize))
    assert report is not None and len(summarize.calls) == 1  # the second round escalated
    assert transcript.counters.tool_rounds == 0 and transcript.counters.summary_rounds == 1


async def test_escalation_in_the_same_round_when_reclaiming_leaves_the_estimate_above_ratio() -> (
    None
):
    # Every tool result is short: tier 1 reclaims nothing, so the estimate stays over 95 %.
    transcript, summarize = filled(40, tokens=193_000), Summarizer()
    transcript.replace(
        [m if m["role"] != "tool" else result(m["tool_call_id"], "ok") for m in transcript.messages]
    )
    report = await AutoCompactor().auto_compact(Compacting(transcript, summarize))
    assert report is not None and report.steps[0] == ToolCallCompactResult(0, 0.0)
    assert len(summarize.calls) == 1 and report.outcome is SummaryStatus.COMPACTED


async def test_still_over_after_a_summary_retries_max_retries_times_halving_both_keeps() -> None:
    transcript, summarize = filled(80, tokens=10_000_000), Summarizer()
    keeps: list[tuple[str, int]] = []
    original_tool, original_plan = transcript.compact_toolcall, transcript.plan_summary
    transcript.compact_toolcall = lambda keep: keeps.append(("tool", keep)) or original_tool(keep)  # type: ignore
    transcript.plan_summary = lambda keep: keeps.append(("summary", keep)) or original_plan(keep)  # type: ignore
    report = await AutoCompactor().auto_compact(Compacting(transcript, summarize))
    assert keeps == [
        ("tool", 12),
        ("summary", 16),
        ("tool", 6),
        ("summary", 8),
        ("tool", 3),
        ("summary", 4),
    ]
    assert report is not None and report.still_over and len(summarize.calls) == 3
    assert summarize.calls[1][1] == "summary"  # each summary is given the previous one


async def test_the_outcomes_nothing_to_condense_and_summarize_failed_reach_the_report() -> None:
    failed = await AutoCompactor().auto_compact(
        Compacting(filled(40, tokens=10_000_000), Summarizer(None))
    )
    assert failed is not None and failed.outcome is SummaryStatus.SUMMARIZE_FAILED
    tiny = Transcript()
    append(tiny, user(), call("a"), result("a", "ok"))
    tiny.commit()
    tiny.note_usage(10_000_000)
    nothing = await AutoCompactor().auto_compact(Compacting(tiny, Summarizer()))
    assert nothing is not None and nothing.outcome is SummaryStatus.NOTHING_TO_CONDENSE
    assert tiny.total_tokens == 10_000_000


async def test_no_compaction_without_a_new_usage_report_however_long_the_transcript() -> None:
    """docs/tools.md: ``total_tokens`` is the only trigger, "reset to None after a
    compaction so it does not trigger again immediately": a transcript still long after a
    compaction is not compacted again until a response reports usage over the threshold."""
    transcript, summarize = filled(80, tokens=10_000_000), Summarizer()
    compactor = AutoCompactor(token_threshold=1_000)
    first = await compactor.auto_compact(Compacting(transcript, summarize))
    assert first is not None and transcript.total_tokens is None
    calls, counters = len(summarize.calls), dataclasses.replace(transcript.counters)
    for _ in range(3):  # checks before the next model calls, no response in between
        assert await compactor.auto_compact(Compacting(transcript, summarize)) is None
    assert len(summarize.calls) == calls and transcript.counters == counters
    transcript.note_usage(5_000)  # the next response's report fires it again
    assert await compactor.auto_compact(Compacting(transcript, summarize)) is not None


async def test_a_custom_compactor_subclasses_compactor_abstract() -> None:
    class Counting(CompactorAbstract):
        def __init__(self) -> None:
            self.seen: list[int] = []

        async def auto_compact(self, agent: Compacting) -> None:
            self.seen.append(len(agent.conversation.all_messages()))

    compactor = Counting()
    await compactor.auto_compact(Compacting(filled(3), Summarizer()))
    assert compactor.seen == [7] and compactor.enabled
    assert (compactor.toolcall_keep_max, compactor.summary_keep_max) == (12, 16)
    with pytest.raises(TypeError):
        CompactorAbstract()  # type: ignore[abstract]
