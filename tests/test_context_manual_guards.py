"""A manual compaction with a weak model (docs/tools.md's ``/compact``, docs/context.md).

The real section actors and compaction workers on an embedded bus, with a ``ScriptedLLM``
that answers every compaction the way a weak model does: the previous summary again
(frozen), a description without the values (lossy), a reply cut off at its output limit,
or an error. With the summary guards on, ``compact()`` does not wait for the section's
next entry after a failure: it goes down the failure ladder at once and returns COMPACTED,
saying the extractive fallback made the summary, with every value of the entries in
``blocks()``, the refusals and fallbacks counted, and no request sent twice in a row.
Unguarded, a failing model still gives SUMMARIZE_FAILED and the entries stay. Tests wait on
the manager's answers, never on sleeps.
"""

from __future__ import annotations

import asyncio
import io
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import pytest

from xrmq.actors.context import ContextManager
from xrmq.actors.context.manual import CompactStatus
from xrmq.actors.context.salience import salient_values
from xrmq.actors.edge.context_commands import compact as compact_command
from xrmq.actors.models import (
    ChatRequest,
    ModelError,
    ScriptedLLM,
    ScriptedResponse,
)
from xrmq.actors.runtime import AgentRuntime
from xrmq.schemas import ConversationContextUpdate

from weak_compactors import frozen, good, lossy

pytestmark = pytest.mark.timeout(30)

T0 = 1_714_572_785_000_000  # 2024-05-01 14:13:05 UTC
SECOND = 1_000_000
TOPIC = "sample.notes"
FILLER = "The corridor lights kept their schedule and the doors stayed shut all night."


def reading(i: int) -> str:
    return f"Sensor S{i} read {100 + i} kPa in room {530 + i}. {FILLER}"


def cut_off(request: ChatRequest) -> ScriptedResponse:
    return ScriptedResponse("Sensor S1 read", finish_reason="length")


def failing(request: ChatRequest) -> ScriptedResponse:
    return ScriptedResponse(error=ModelError("scripted", "provider down"))


class Model:
    """A ScriptedLLM whose answers a test switches: good first, weak when told."""

    def __init__(self) -> None:
        self.answer = good
        self.llm = ScriptedLLM(default=lambda request: self.answer(request))


@asynccontextmanager
async def running(llm: ScriptedLLM, **kwargs) -> AsyncIterator[tuple[ContextManager, AgentRuntime]]:
    runtime = AgentRuntime()
    context = ContextManager(
        llm, incremental_context_topics=(TOPIC,), topic_budget_bytes=3000, **kwargs
    )
    runtime.register("context", context.subscriber())
    async with runtime:
        try:
            async with asyncio.timeout(25):
                yield context, runtime
        finally:
            await context.close()


async def note(context: ContextManager, i: int) -> None:
    await context.update(
        "p1",
        TOPIC,
        ConversationContextUpdate(reading(i)),
        mode="incremental",
        timestamp_us=T0 + i * SECOND,
    )


def shown(context: ContextManager) -> str:
    return "\n".join(block.text for block in context.blocks("p1"))


def longest_repeat(llm: ScriptedLLM) -> int:
    """The most times in a row one request (system prompt and material) was sent."""
    sent = [tuple(message.content for message in request.messages) for request in llm.requests]
    run = longest = 0
    for index, request in enumerate(sent):
        run = run + 1 if index and request == sent[index - 1] else 1
        longest = max(longest, run)
    return longest


@pytest.mark.parametrize(
    ("weak", "gauge"),
    [
        (frozen, "context.summaries_frozen"),
        (lossy, "context.summaries_lossy"),
        (cut_off, None),
        (failing, None),
    ],
    ids=["frozen", "lossy", "cut-off", "error"],
)
async def test_a_manual_compaction_with_a_weak_model_compacts_by_the_extractive_fallback(
    weak, gauge
):
    model = Model()
    async with running(model.llm) as (context, runtime):
        # A first summary by a good model (so a frozen one has a previous summary to repeat).
        for i in range(3):
            await note(context, i)
        first = await context.compact("p1", TOPIC)
        assert first.status is CompactStatus.COMPACTED
        assert first.sections[0].made_by == ("model",)
        # New notes, below the half-budget trigger: only the manual compaction compacts them.
        for i in range(3, 8):
            await note(context, i)
        await context.synced()
        values = salient_values(shown(context))
        assert {"s7", "107", "537"} <= values
        asked = len(model.llm.requests)
        model.answer = weak
        outcome = await context.compact("p1", TOPIC)
        gauges = runtime.metrics().gauges
        after = shown(context).lower()
        entries = [block for block in context.blocks("p1") if block.timestamp_us is not None]
        with io.StringIO() as out:
            code = await compact_command(context, "p1", TOPIC, out)
            printed = out.getvalue()
    assert outcome.status is CompactStatus.COMPACTED, outcome.message()
    assert entries == []  # every entry left for the summary
    assert outcome.sections[0].made_by == ("extractive",)
    assert "by the extractive fallback" in outcome.message()
    assert {value for value in values if value not in after} == set()
    assert len(model.llm.requests) > asked + 1, "the model was asked again after its failure"
    assert longest_repeat(model.llm) == 1
    assert gauges["context.compaction_fallbacks"] >= 1
    if gauge is not None:
        assert gauges[gauge] >= 1
    # `xrmq context compact` prints the outcome; nothing is left to compact now.
    assert (code, printed.strip()) == (0, f"{TOPIC}: nothing to compact (NOTHING_TO_CONDENSE)")


async def test_a_manual_compaction_with_a_good_model_is_made_by_the_model():
    model = Model()
    async with running(model.llm) as (context, runtime):
        for i in range(5):
            await note(context, i)
        await context.synced()
        values = salient_values(shown(context))
        with io.StringIO() as out:
            code = await compact_command(context, "p1", TOPIC, out)
            printed = out.getvalue()
        gauges = runtime.metrics().gauges
        after = shown(context).lower()
    assert code == 0
    assert printed.strip() == f"{TOPIC}: compacted into its summary by the model"
    assert {value for value in values if value not in after} == set()
    assert len(model.llm.requests) == 1
    assert gauges.get("context.compaction_fallbacks", 0) == 0


async def test_an_unguarded_manual_compaction_with_a_failing_model_keeps_the_entries():
    model = Model()
    model.answer = cut_off
    async with running(model.llm, summary_guards=False) as (context, _):
        for i in range(5):
            await note(context, i)
        await context.synced()
        before = context.blocks("p1")
        with io.StringIO() as out:
            code = await compact_command(context, "p1", TOPIC, out)
            printed = out.getvalue()
        assert context.blocks("p1") == before
    assert code == 1
    assert printed.strip() == (
        f"{TOPIC}: failed, entries kept (SUMMARIZE_FAILED): the model stopped: length"
    )
    assert len(model.llm.requests) == 1  # retried only after the section's next entry


async def test_a_manual_compaction_while_the_model_backs_off_is_made_by_the_fallback_at_once():
    """After fallbacks in a row the model backs off (docs/context.md): a manual compaction
    then asks no model, and is still reported."""
    model = Model()
    model.answer = lossy
    silent = None
    async with running(model.llm) as (context, _):
        for round_ in range(6):
            for i in range(round_ * 4, round_ * 4 + 4):
                await note(context, i)
            await context.synced()
            asked = len(model.llm.requests)
            outcome = await context.compact("p1", TOPIC)
            assert outcome.status is CompactStatus.COMPACTED, outcome.message()
            assert outcome.sections[0].made_by == ("extractive",)
            if len(model.llm.requests) == asked:
                silent = round_
                break
        entries = [block for block in context.blocks("p1") if block.timestamp_us is not None]
    assert silent is not None, "the model never backed off"
    assert entries == []
