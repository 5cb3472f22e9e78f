"""ContextManager through its public API, local deployment (docs/context.md: the reference
"The context manager", "Context compaction", "Prompt layout", "Lifecycle").

Every test runs the real actors on an embedded bus with a ``ScriptedLLM`` that scripts
each compaction outcome; tests wait on events (model requests, replica changes), never
on sleeps.
"""

from __future__ import annotations

import asyncio
import time
from contextlib import asynccontextmanager

import pytest
import structlog

from xrmq.actors.context import OMISSION_MARKER, ContextManager, utf8_size
from xrmq.actors.models import (
    ModelError,
    ScriptedLLM,
    ScriptedResponse,
    compaction_limit_instruction,
)
from xrmq.actors.runtime import Agent, AgentRuntime
from xrmq.schemas import CompactionPrompts, ConversationContextUpdate
from xrmq.topics import context_topic

pytestmark = pytest.mark.timeout(20)

T0 = 1_714_572_785_000_000  # 2024-05-01 14:13:05 UTC
SECOND = 1_000_000
EXCHANGE_HEADER = 44  # "[2024-05-01 14:13:05 UTC] User: \nAssistant: "
HANG = ScriptedResponse(hang=True)


class SignalLLM(ScriptedLLM):
    """A ScriptedLLM a test can await: ``wait_started(n)``/``wait_ended(n)`` return once n
    requests began/ended."""

    def __init__(self, *responses, **kwargs) -> None:
        super().__init__(*responses, **kwargs)
        self.started = 0
        self.ended = 0
        self._wake: asyncio.Future | None = None

    def _notify(self) -> None:
        if self._wake is not None and not self._wake.done():
            self._wake.set_result(None)

    async def _wait(self, done) -> None:
        while not done():
            self._wake = asyncio.get_running_loop().create_future()
            await self._wake

    async def wait_started(self, count: int) -> None:
        await self._wait(lambda: self.started >= count)

    async def wait_ended(self, count: int) -> None:
        await self._wait(lambda: self.ended >= count)

    async def _generate(self, request):
        self.started += 1
        self._notify()
        inner = super()._generate(request)
        try:
            async for item in inner:
                yield item
        finally:
            await inner.aclose()
            self.ended += 1
            self._notify()


@asynccontextmanager
async def embedded(llm, **kwargs):
    kwargs.setdefault("incremental_context_topics", ("sample.notes",))
    kwargs.setdefault("summary_context_topics", ("sample.monitor-window",))
    runtime = AgentRuntime()
    context = ContextManager(llm, **kwargs)
    runtime.register("context", context.subscriber())
    async with runtime:
        try:
            async with asyncio.timeout(10):
                yield runtime, context
        finally:
            await context.close()


async def until(context: ContextManager, predicate) -> None:
    while not predicate():
        await context.changed()


def exchange(context, participant, i, size=100, exchange_id=None):
    request = f"q{i}"
    answer = f"a{i}-".ljust(size - EXCHANGE_HEADER - len(request), "a")
    context.record_exchange(
        participant,
        request,
        answer,
        timestamp_us=T0 + i * SECOND,
        exchange_id=exchange_id or f"turn-{i}",
    )


def texts(context, participant):
    return [block.text for block in context.blocks(participant)]


def has_summary(context, participant, summary):
    return any(
        block.timestamp_us is None and summary in block.text
        for block in context.blocks(participant)
    )


def user_message(request) -> str:
    return request.messages[1].content


# --- constructor (docs/context.md) ---------------------------------------------------------------


def test_defaults_are_the_seeds_budgets_and_prompts():
    context = ContextManager(
        ScriptedLLM(), summary_context_topics=("a",), incremental_context_topics=("b",)
    )
    config = context.plan.config
    assert config.dialogue.spec.budget_bytes == 8_000
    assert [section.spec.budget_bytes for section in config.topics] == [4_000, 4_000]
    assert config.dialogue.settings.input_budget_bytes == 12_000
    assert config.dialogue.settings.prompts == CompactionPrompts()


def test_default_input_budget_of_12000_bounds_the_largest_section_budget():
    ContextManager(ScriptedLLM(), dialogue_budget_bytes=23_488)  # 11_744 + 256 = 12_000
    with pytest.raises(ValueError, match="compaction_input_budget_bytes"):
        ContextManager(ScriptedLLM(), dialogue_budget_bytes=23_489)
    with pytest.raises(ValueError, match="compaction_input_budget_bytes"):
        ContextManager(
            ScriptedLLM(), incremental_context_topics=("n",), topic_budget_bytes={"n": 23_489}
        )


@pytest.mark.parametrize(
    "kwargs, parameter",
    [
        ({"dialogue_budget_bytes": 0}, "dialogue_budget_bytes"),
        ({"topic_budget_bytes": -1}, "topic_budget_bytes"),
        ({"compaction_input_budget_bytes": 0}, "compaction_input_budget_bytes"),
        ({"summary_context_topics": ("",)}, "summary_context_topics"),
        ({"incremental_context_topics": ("n", "n")}, "incremental_context_topics"),
        (
            {"summary_context_topics": ("n",), "incremental_context_topics": ("n",)},
            "incremental_context_topics",
        ),
        (
            {"incremental_context_topics": ("a", "b"), "topic_budget_bytes": {"a": 100}},
            "topic_budget_bytes",
        ),
        (
            {"incremental_context_topics": ("a",), "topic_budget_bytes": {"a": 100, "z": 5}},
            "topic_budget_bytes",
        ),
        ({"compaction_workers": 0}, "compaction_workers"),
        ({"deployment": "cloud"}, "deployment"),
    ],
)
def test_invalid_configuration_raises_naming_the_parameter(kwargs, parameter):
    with pytest.raises(ValueError, match=parameter):
        ContextManager(ScriptedLLM(), **kwargs)


def test_per_topic_budget_mapping_sets_each_topic_budget():
    context = ContextManager(
        ScriptedLLM(),
        summary_context_topics=("sample.monitor-window",),
        incremental_context_topics=("sample.notes",),
        topic_budget_bytes={"sample.monitor-window": 2_000, "sample.notes": 6_000},
    )
    assert {s.spec.name: s.spec.budget_bytes for s in context.plan.config.topics} == {
        "sample.monitor-window": 2_000,
        "sample.notes": 6_000,
    }


def test_subscriber_requires_at_least_one_topic():
    with pytest.raises(ValueError, match="subscriber: configure at least one topic"):
        ContextManager(ScriptedLLM()).subscriber()


def test_subscriber_is_an_agent_and_attaches_the_manager_to_one_runtime_only():
    context = ContextManager(ScriptedLLM(), incremental_context_topics=("n",))
    subscriber = context.subscriber()
    assert isinstance(subscriber, Agent)
    runtime = AgentRuntime()
    runtime.register("context", subscriber)
    with pytest.raises(RuntimeError, match="already attached"):
        AgentRuntime().register("context", context.subscriber())


async def test_subscriber_brings_sections_and_workers_into_the_runtime():
    async with embedded(ScriptedLLM(), compaction_workers=3) as (runtime, _context):
        actors = set(runtime.metrics().actors)
    assert {
        "context",
        "context.topic.sample.notes",
        "context.topic.sample.monitor-window",
        "context.worker.0",
        "context.worker.1",
        "context.worker.2",
    } <= actors


# --- update() and sensor topics (docs/context.md, "ContextManager") ----------------------------


async def test_update_rejects_an_unknown_source_and_a_wrong_mode():
    async with embedded(ScriptedLLM()) as (_, context):
        with pytest.raises(ValueError, match="source"):
            await context.update(
                "p1", "sample.other", ConversationContextUpdate("x"), mode="incremental"
            )
        with pytest.raises(ValueError, match="mode"):
            await context.update(
                "p1", "sample.notes", ConversationContextUpdate("x"), mode="summary"
            )
        assert context.blocks("p1") == ()


async def test_update_is_in_the_next_blocks_and_defaults_its_time_to_now():
    async with embedded(ScriptedLLM()) as (_, context):
        before = time.time_ns() // 1000
        await context.update(
            "p1", "sample.notes", ConversationContextUpdate("Badge 42 entered."), mode="incremental"
        )
        after = time.time_ns() // 1000
        [block] = context.blocks("p1")
    assert block.text.endswith("[sample.notes] Badge 42 entered.")
    assert before <= block.timestamp_us <= after


async def test_summary_update_replaces_state_and_incremental_appends():
    async with embedded(ScriptedLLM()) as (_, context):
        for i, text in enumerate(["window A", "window B"]):
            await context.update(
                "p1",
                "sample.monitor-window",
                ConversationContextUpdate(text),
                mode="summary",
                timestamp_us=T0 + i * SECOND,
            )
        for i, text in enumerate(["note 1", "note 2"]):
            await context.update(
                "p1",
                "sample.notes",
                ConversationContextUpdate(text),
                mode="incremental",
                timestamp_us=T0 + (2 + i) * SECOND,
            )
        assert texts(context, "p1") == [
            "[2024-05-01 14:13:06 UTC] [sample.monitor-window] Current state: window B",
            "[2024-05-01 14:13:07 UTC] [sample.notes] note 1",
            "[2024-05-01 14:13:08 UTC] [sample.notes] note 2",
        ]


async def test_summary_update_does_not_clear_another_topic_of_the_same_participant():
    async with embedded(ScriptedLLM()) as (_, context):
        await context.update(
            "p1",
            "sample.notes",
            ConversationContextUpdate("note"),
            mode="incremental",
            timestamp_us=T0,
        )
        await context.update(
            "p1",
            "sample.monitor-window",
            ConversationContextUpdate("w1"),
            mode="summary",
            timestamp_us=T0 + 1,
        )
        await context.update(
            "p1",
            "sample.monitor-window",
            ConversationContextUpdate("w2"),
            mode="summary",
            timestamp_us=T0 + 2,
        )
        assert [t[-4:] for t in texts(context, "p1")] == ["note", ": w2"]


async def test_sensor_updates_on_the_topic_are_participant_scoped():
    async with embedded(ScriptedLLM()) as (runtime, context):
        await runtime.publish(
            context_topic("sample.notes"), ConversationContextUpdate("for p1"), participant_id="p1"
        )
        await runtime.publish(
            context_topic("sample.monitor-window"),
            ConversationContextUpdate("screen p2"),
            participant_id="p2",
        )
        await until(context, lambda: context.blocks("p1") and context.blocks("p2"))
        assert [t.split("] ", 1)[1] for t in texts(context, "p1")] == ["[sample.notes] for p1"]
        assert [t.split("] ", 1)[1] for t in texts(context, "p2")] == [
            "[sample.monitor-window] Current state: screen p2"
        ]


async def test_agents_sharing_a_manager_read_and_write_the_same_context():
    async with embedded(ScriptedLLM()) as (_, context):
        exchange(context, "p1", 0)  # written by one agent
        await context.update(
            "p1",
            "sample.notes",
            ConversationContextUpdate("from another agent"),
            mode="incremental",
            timestamp_us=T0 + SECOND,
        )
        first_reader, second_reader = context.blocks("p1"), context.blocks("p1")
    assert first_reader == second_reader and len(first_reader) == 2


# --- record_exchange / reconcile_history -----------------------------------------------------


async def test_record_exchange_is_read_your_writes():
    async with embedded(ScriptedLLM()) as (_, context):
        context.record_exchange(
            "p1", "When is calibration?", "At 15:30.", timestamp_us=T0, exchange_id="t1"
        )
        assert texts(context, "p1") == [
            "[2024-05-01 14:13:05 UTC] User: When is calibration?\nAssistant: At 15:30."
        ]
        await context.synced()  # and the dialogue section's view agrees
        assert texts(context, "p1") == [
            "[2024-05-01 14:13:05 UTC] User: When is calibration?\nAssistant: At 15:30."
        ]


async def test_an_exchange_with_a_known_identity_is_not_added_again():
    async with embedded(ScriptedLLM()) as (_, context):
        context.record_exchange("p1", "q", "a", timestamp_us=T0, exchange_id="t1")
        context.record_exchange("p1", "q again", "a again", timestamp_us=T0 + 1, exchange_id="t1")
        context.record_exchange("p1", "same", "content", timestamp_us=T0 + 2, exchange_id=None)
        context.record_exchange("p1", "same", "content", timestamp_us=T0 + 2, exchange_id=None)
        await context.synced()
        assert len(context.blocks("p1")) == 2


async def test_reconcile_history_adds_only_the_tail_after_the_last_known_exchange():
    async with embedded(ScriptedLLM()) as (_, context):
        context.record_exchange("p1", "q2", "a2", timestamp_us=T0 + 2, exchange_id="t2")
        window = [
            ("q1", "a1", T0 + 1),
            ("q2", "a2", T0 + 2),
            ("q3", "a3", T0 + 3),
            ("q4", "a4", None),
        ]
        before = time.time_ns() // 1000
        context.reconcile_history("p1", window, exchange_ids=["t1", "t2", "t3", "t4"])
        # replays nothing
        context.reconcile_history("p1", window, exchange_ids=["t1", "t2", "t3", "t4"])
        blocks = context.blocks("p1")
        assert [b.text.split("User: ")[1][:2] for b in blocks] == ["q2", "q3", "q4"]
        assert blocks[-1].timestamp_us >= before
        with pytest.raises(ValueError, match="exchange_ids"):
            context.reconcile_history("p1", window, exchange_ids=["t1"])
        await context.synced()
        assert len(context.blocks("p1")) == 3


async def test_two_writers_whose_exchanges_interleave_are_recorded_again():
    """docs/context.md: reconciliation matches only a contiguous tail, so one writer per manager."""
    async with embedded(ScriptedLLM()) as (_, context):
        context.record_exchange("p1", "a1", "x", timestamp_us=T0 + 1, exchange_id="a1")
        context.record_exchange("p1", "a2", "x", timestamp_us=T0 + 3, exchange_id="a2")
        window = [("a1", "x", T0 + 1), ("b1", "x", T0 + 2), ("a2", "x", T0 + 3)]
        context.reconcile_history("p1", window, exchange_ids=["a1", "b1", "a2"])
        assert len(context.blocks("p1")) == 2  # b1 lies before the last known exchange: not added


# --- prompt layout ------------------------------------------------------------------------------


async def test_blocks_are_summaries_first_then_every_section_in_recorded_time_order():
    llm = SignalLLM(default="dialogue summary 14:13 to 14:43")
    async with embedded(llm, dialogue_budget_bytes=1000, topic_budget_bytes=1000) as (_, context):
        for i in range(6):
            exchange(context, "p1", i * 600)  # 14:13 .. 15:03, 100 bytes each: compaction due
        await llm.wait_started(1)
        await context.update(
            "p1",
            "sample.notes",
            ConversationContextUpdate("at 14:18"),
            mode="incremental",
            timestamp_us=T0 + 300 * SECOND,
        )
        await context.update(
            "p1",
            "sample.monitor-window",
            ConversationContextUpdate("screen"),
            mode="summary",
            timestamp_us=T0 + 2700 * SECOND,
        )
        await until(context, lambda: has_summary(context, "p1", "dialogue summary"))
        blocks = context.blocks("p1")
    assert blocks[0].timestamp_us is None and blocks[0].text.startswith(
        "Summary of earlier conversation: "
    )
    dated = [block.timestamp_us for block in blocks[1:]]
    assert None not in dated and dated == sorted(dated)
    assert [b.text[26:39] for b in blocks[1:]] == [
        "[sample.notes",
        "[sample.monit",
        "User: q3000\nA",
    ]


# --- compaction (docs/context.md, "Compaction")
# ----------------------------------------------------


async def test_rolling_summary_merges_previous_summary_with_oldest_entries():
    llm = SignalLLM("first summary", "second summary")
    async with embedded(llm, dialogue_budget_bytes=1000) as (_, context):
        for i in range(6):
            exchange(context, "p1", i)
        await until(context, lambda: has_summary(context, "p1", "first summary"))
        assert len(context.blocks("p1")) == 2  # the summary and the newest exchange
        first = user_message(llm.requests[0])
        assert "q0" in first and "q4" in first and "q5" not in first  # newest stays verbatim
        for i in range(6, 11):
            exchange(context, "p1", i)
        await until(context, lambda: has_summary(context, "p1", "second summary"))
        second = user_message(llm.requests[1])
        assert "<previous_summary>\nfirst summary\n</previous_summary>" in second
        assert [b.text.split("User: ")[1][:3] for b in context.blocks("p1")[1:]] == ["q10"]


async def test_compaction_starts_past_half_the_budget_and_states_a_quarter_as_the_limit():
    llm = SignalLLM(default="summary")
    async with embedded(llm, dialogue_budget_bytes=1000) as (_, context):
        for i in range(5):
            exchange(context, "p1", i)  # 500 bytes: not more than half
        await context.synced()
        assert llm.started == 0
        exchange(context, "p1", 5)
        await llm.wait_started(1)
        system = llm.requests[0].messages[0].content
    assert compaction_limit_instruction(250) in system
    assert llm.requests[0].options.thinking is False


async def test_a_larger_backlog_is_compacted_oldest_first_in_several_requests():
    llm = SignalLLM(default="s")
    async with embedded(
        llm, dialogue_budget_bytes=2000, topic_budget_bytes=2000, compaction_input_budget_bytes=1256
    ) as (_, context):
        context.reconcile_history(
            "p1", [(f"q{i}", "a" * 250, T0 + i) for i in range(8)], exchange_ids=list(range(8))
        )
        await until(
            context,
            lambda: (
                len(llm.requests) >= 2
                and context.blocks("p1")[0].timestamp_us is None
                and len(context.blocks("p1")) == 2
            ),
        )
        first, second = user_message(llm.requests[0]), user_message(llm.requests[1])
    assert "q0" in first and "q3" in first and "q4" not in first
    assert "q4" in second and "q6" in second and "q7" not in second
    assert all(utf8_size(user_message(r)) <= 1256 + 60 for r in llm.requests)


async def test_summary_topic_is_never_compacted():
    llm = SignalLLM()
    async with embedded(llm, topic_budget_bytes=400, dialogue_budget_bytes=400) as (_, context):
        for i in range(5):
            await context.update(
                "p1",
                "sample.monitor-window",
                ConversationContextUpdate("s" * 300),
                mode="summary",
                timestamp_us=T0 + i,
            )
        assert llm.started == 0 and len(context.blocks("p1")) == 1


async def test_incremental_topic_compacts_with_its_source_prompt_custom_prompts_get_limit_format():
    prompts = CompactionPrompts(
        source="Keep badge numbers.", dialogue="Keep promises.", condense="Shorter."
    )
    llm = SignalLLM(default="notes summary")
    # The scripted summary is a placeholder without the badge numbers (the guards would refuse
    # it); this test is about the request's prompts, not summary quality.
    async with embedded(
        llm, topic_budget_bytes=1000, compaction_prompts=prompts, summary_guards=False
    ) as (_, context):
        for i in range(6):
            await context.update(
                "p1",
                "sample.notes",
                ConversationContextUpdate(f"badge {i} " + "x" * 80),
                mode="incremental",
                timestamp_us=T0 + i,
            )
        await until(context, lambda: has_summary(context, "p1", "notes summary"))
        system = llm.requests[0].messages[0].content
    assert system.startswith("Keep badge numbers.\n\n")
    assert compaction_limit_instruction(250) in system and "Markdown" in system


# --- the Situation / Handling table
# -----------------------------------------------------------------


async def test_over_limit_summary_gets_one_condense_request_then_is_applied():
    llm = SignalLLM("x" * 400, "short summary")
    async with embedded(llm, dialogue_budget_bytes=1000) as (_, context):
        for i in range(6):
            exchange(context, "p1", i)
        await until(context, lambda: has_summary(context, "p1", "short summary"))
    assert len(llm.requests) == 2
    assert llm.requests[1].messages[0].content.startswith(CompactionPrompts().condense)


@pytest.mark.parametrize(
    "condense", [ScriptedResponse("y" * 400, finish_reason="length"), "z" * 400]
)
async def test_cut_off_or_still_long_condense_keeps_start_and_end_within_the_limit(condense):
    llm = SignalLLM("START" + "x" * 400 + "END", condense)
    async with embedded(llm, dialogue_budget_bytes=1000) as (_, context):
        for i in range(6):
            exchange(context, "p1", i)
        await until(context, lambda: any(OMISSION_MARKER in b.text for b in context.blocks("p1")))
        summary = context.blocks("p1")[0].text.removeprefix("Summary of earlier conversation: ")
    assert utf8_size(summary) <= 250 and OMISSION_MARKER in summary


@pytest.mark.parametrize(
    "failure",
    [
        ScriptedResponse(""),
        ScriptedResponse("cut", finish_reason="length"),
        ScriptedResponse(error=ModelError("m", "down")),
    ],
)
async def test_empty_cut_off_or_failed_compaction_keeps_entries_and_retries_after_next_entry(
    failure,
):
    llm = SignalLLM(failure, "recovered summary")
    async with embedded(llm, dialogue_budget_bytes=1000) as (_, context):
        for i in range(6):
            exchange(context, "p1", i)
        await llm.wait_ended(1)  # the worker publishes the failed result before this test resumes
        await context.synced()
        assert llm.started == 1 and len(context.blocks("p1")) == 6  # entries kept
        exchange(context, "p1", 6)  # handled after the result: the retry follows this entry
        await until(context, lambda: has_summary(context, "p1", "recovered summary"))
    assert llm.started == 2


async def test_one_exchange_larger_than_a_request_keeps_start_and_end_so_later_entries_compact():
    llm = SignalLLM(default="s")
    async with embedded(
        llm, dialogue_budget_bytes=1000, topic_budget_bytes=1000, compaction_input_budget_bytes=756
    ) as (_, context):
        context.record_exchange(
            "p1", "HEAD" + "x" * 3000 + "TAIL", "answer", timestamp_us=T0, exchange_id=1
        )
        exchange(context, "p1", 1)
        await llm.wait_started(1)
        message = user_message(llm.requests[0])
    assert OMISSION_MARKER in message and "HEAD" in message and "TAIL" in message
    assert utf8_size(message) <= 756 + 60


async def test_over_budget_while_compaction_pends_keeps_newest_and_warns_others_unaffected():
    llm = SignalLLM(default=HANG)
    async with embedded(llm, dialogue_budget_bytes=1000, topic_budget_bytes=1000) as (_, context):
        await context.update(
            "p1",
            "sample.notes",
            ConversationContextUpdate("unaffected note"),
            mode="incremental",
            timestamp_us=T0,
        )
        with structlog.testing.capture_logs() as logs:
            for i in range(1, 15):
                exchange(context, "p1", i)
            await context.synced()
        blocks = context.blocks("p1")
    dialogue = [b for b in blocks if "User:" in b.text]
    assert sum(utf8_size(b.text) for b in dialogue) <= 1000
    assert dialogue[-1].text.split("User: ")[1][:3] == "q14"
    assert dialogue[0].text.split("User: ")[1][:2] != "q1"
    assert any("unaffected note" in b.text for b in blocks)
    assert any(entry["event"] == "context.over_budget" for entry in logs)


async def test_one_very_large_exchange_keeps_its_start_and_end_in_the_prompt():
    async with embedded(SignalLLM(default=HANG), dialogue_budget_bytes=1000) as (_, context):
        context.record_exchange("p1", "HEAD" + "é" * 2000, "TAIL", timestamp_us=T0, exchange_id=1)
        local = context.blocks("p1")  # the manager's overlay, before the section answered
        await context.synced()
        for [block] in (local, context.blocks("p1")):
            assert (
                utf8_size(block.text) <= 1000
                and "HEAD" in block.text
                and block.text.endswith("TAIL")
            )


async def test_summary_topic_update_over_its_budget_keeps_start_and_end():
    async with embedded(SignalLLM(), topic_budget_bytes=500) as (_, context):
        await context.update(
            "p1",
            "sample.monitor-window",
            ConversationContextUpdate("BEGIN" + "w" * 2000 + "FINISH"),
            mode="summary",
            timestamp_us=T0,
        )
        [block] = context.blocks("p1")
    assert utf8_size(block.text) <= 500 and "BEGIN" in block.text and block.text.endswith("FINISH")


async def test_history_window_with_compacted_exchanges_is_not_added_again():
    llm = SignalLLM(default="summary of q0 to q4")
    async with embedded(llm, dialogue_budget_bytes=1000) as (_, context):
        for i in range(6):
            exchange(context, "p1", i)
        await until(context, lambda: has_summary(context, "p1", "summary of q0"))
        window = [
            (f"q{i}", f"a{i}-".ljust(100 - EXCHANGE_HEADER - len(f"q{i}"), "a"), T0 + i * SECOND)
            for i in range(6)
        ]
        context.reconcile_history("p1", window, exchange_ids=[f"turn-{i}" for i in range(6)])
        await context.synced()
        assert len(context.blocks("p1")) == 2


# --- background compaction never delays -----------------------------------------------------------


async def test_a_hanging_model_does_not_delay_record_exchange_update_or_blocks():
    llm = SignalLLM(default=HANG)
    async with embedded(llm, dialogue_budget_bytes=1000, topic_budget_bytes=1000) as (_, context):
        for i in range(6):
            exchange(context, "p1", i)
        for i in range(6):
            await context.update(
                "p1",
                "sample.notes",
                ConversationContextUpdate("n" * 80),
                mode="incremental",
                timestamp_us=T0 + i,
            )
        await llm.wait_started(2)  # dialogue and topic compact at once, each in the background
        assert llm.open_streams == 2
        exchange(context, "p1", 7)
        assert "q7" in context.blocks("p1")[-1].text  # synchronous, while both calls hang
        await context.update(
            "p1", "sample.monitor-window", ConversationContextUpdate("still live"), mode="summary"
        )
        assert any("still live" in b.text for b in context.blocks("p1"))
        assert llm.open_streams == 2


# --- worker pool
# ------------------------------------------------------------------------------------


async def test_a_timed_out_job_goes_to_another_worker_and_the_first_answer_wins():
    llm = SignalLLM(HANG, "answer from the second worker")
    async with embedded(llm, dialogue_budget_bytes=1000, compaction_timeout_s=0.2) as (_, context):
        for i in range(6):
            exchange(context, "p1", i)
        await until(context, lambda: has_summary(context, "p1", "second worker"))
        assert llm.started == 2 and user_message(llm.requests[0]) == user_message(llm.requests[1])


async def test_worker_concurrency_bounds_model_calls_and_queued_jobs_start_when_a_slot_frees():
    llm = SignalLLM(default=HANG)
    async with embedded(
        llm, dialogue_budget_bytes=1000, compaction_workers=1, worker_concurrency=2
    ) as (_, context):
        for participant in ("p1", "p2", "p3"):
            for i in range(6):
                exchange(context, participant, i)
        await llm.wait_started(2)
        await context.synced()
        assert llm.started == 2 and llm.open_streams == 2  # the third job waits for a slot
        await context.clear("p1")
        await context.clear("p2")
        await llm.wait_started(3)  # the queued job runs once clearing freed the slots


# --- lifecycle
# ----------------------------------------------------------------------------------------


async def test_clear_cancels_and_awaits_the_participants_jobs_and_forgets_it():
    llm = SignalLLM(default=HANG)
    async with embedded(llm, dialogue_budget_bytes=1000, topic_budget_bytes=1000) as (
        runtime,
        context,
    ):
        for i in range(6):
            exchange(context, "p1", i)
            await context.update(
                "p1",
                "sample.notes",
                ConversationContextUpdate("n" * 80),
                mode="incremental",
                timestamp_us=T0 + i,
            )
        await llm.wait_started(2)
        await context.clear("p1")
        assert llm.open_streams == 0  # both model calls were closed before clear returned
        assert context.blocks("p1") == ()
        await until(context, lambda: "p1" not in runtime.keyed_instances("context.dialogue"))


async def test_clear_is_idempotent_and_leaves_other_participants_unchanged():
    async with embedded(SignalLLM(default=HANG)) as (_, context):
        for participant in ("p1", "p2"):
            exchange(context, participant, 1)
            await context.update(
                participant,
                "sample.notes",
                ConversationContextUpdate(f"note {participant}"),
                mode="incremental",
                timestamp_us=T0,
            )
        await context.synced()
        before = context.blocks("p2")
        await context.clear("p1")
        await context.clear("p1")
        await context.clear("never-seen")
        assert context.blocks("p1") == () and context.blocks("p2") == before


async def test_an_exchange_recorded_after_clear_starts_new_context():
    async with embedded(SignalLLM()) as (_, context):
        exchange(context, "p1", 1)
        await context.update(
            "p1",
            "sample.notes",
            ConversationContextUpdate("old"),
            mode="incremental",
            timestamp_us=T0,
        )
        await context.clear("p1")
        exchange(context, "p1", 1)  # the same turn id is new context now
        await context.synced()
        assert [b.text.split("User: ")[1][:2] for b in context.blocks("p1")] == ["q1"]


async def test_close_cancels_jobs_forgets_everyone_and_drops_later_writes():
    llm = SignalLLM(default=HANG)
    async with embedded(llm, dialogue_budget_bytes=1000) as (runtime, context):
        for participant in ("p1", "p2"):
            for i in range(6):
                exchange(context, participant, i)
        await llm.wait_started(2)
        await context.close()
        assert llm.open_streams == 0
        exchange(context, "p1", 9)
        context.reconcile_history("p1", [("q", "a", T0)], exchange_ids=["x"])
        await context.update(
            "p1", "sample.notes", ConversationContextUpdate("dropped"), mode="incremental"
        )
        await runtime.publish(
            context_topic("sample.notes"), ConversationContextUpdate("dropped"), participant_id="p1"
        )
        assert context.blocks("p1") == () and context.blocks("p2") == ()
        await context.close()  # idempotent


async def test_a_manager_without_topics_hosts_its_actors_on_a_private_runtime():
    llm = SignalLLM(default="private summary")
    context = ContextManager(llm, dialogue_budget_bytes=1000)
    try:
        async with asyncio.timeout(10):
            for i in range(6):
                exchange(context, "p1", i)
            assert len(context.blocks("p1")) == 6
            await until(context, lambda: has_summary(context, "p1", "private summary"))
    finally:
        await context.close()
    assert context.blocks("p1") == ()


async def test_clear_right_after_a_write_on_a_private_runtime_that_is_still_starting_forgets_it():
    context = ContextManager(ScriptedLLM())
    context.record_exchange(
        "p1", "My badge is 4471.", "Noted.", timestamp_us=1_714_574_587_000_000, exchange_id="t1"
    )
    await asyncio.sleep(0)  # let the private runtime begin starting; not a wait for a result
    await context.clear("p1")
    assert context.blocks("p1") == ()
    await context.close()


async def test_context_actors_report_compactions_and_participants_in_runtime_metrics():
    llm = ScriptedLLM(default=ScriptedResponse("Summary: earlier exchanges."))
    context = ContextManager(
        llm,
        incremental_context_topics=("notes",),
        dialogue_budget_bytes=600,
        topic_budget_bytes=600,
        compaction_input_budget_bytes=600,
        # A placeholder summary without the questions' numbers (the guards would refuse it):
        # this test is about the runtime's metrics, not summary quality.
        summary_guards=False,
    )
    runtime = AgentRuntime()
    runtime.register("context", context.subscriber())
    async with runtime:
        for turn in range(6):
            context.record_exchange(
                "p1",
                f"Question {turn} about the lab schedule?",
                "An answer " * 8,
                timestamp_us=1_714_574_587_000_000 + turn,
                exchange_id=f"t{turn}",
            )
        while runtime.metrics().gauges.get("context.compactions", 0) < 1:
            await context.changed()
        gauges = runtime.metrics().gauges
    assert gauges["context.participants"] == 1
    assert gauges["context.compactions"] >= 1
    await context.close()
