"""Summary guards through the ContextManager (issue 32; docs/context.md, "Compaction").

The real section actors and compaction workers on an embedded bus, with a ``ScriptedLLM``
that answers every compaction the way a weak model does: the previous summary again, a
description without the values, or a reply cut off at its output limit. No value of the
notes leaves ``blocks()``, the extractive fallback is used and counted in the runtime's
gauges, and no request is sent unchanged more than twice in a row. Tests wait on replica
changes, never on sleeps.
"""

from __future__ import annotations

import asyncio

import pytest

from xrmq.actors.context import ContextManager, context_config
from xrmq.actors.context.config import ContextTable
from xrmq.actors.context.salience import salient_values
from xrmq.actors.models import ChatRequest, ScriptedLLM, ScriptedResponse
from xrmq.actors.runtime import AgentRuntime
from xrmq.schemas import ConversationContextUpdate

from weak_compactors import frozen, lossy

pytestmark = pytest.mark.timeout(30)

T0 = 1_714_572_785_000_000  # 2024-05-01 14:13:05 UTC
SECOND = 1_000_000
FILLER = (
    "Nothing else changed in the building during that quiet interval; the corridors stayed "
    "empty, the lights kept their schedule and the doors stayed shut as on every night."
)
TOPIC = "sample.notes"


def reading(i: int) -> str:
    return f"S{i}: {100 + i} kPa. {FILLER}"


def cut_off(request: ChatRequest) -> ScriptedResponse:
    return ScriptedResponse("S1: 1", finish_reason="length")


@pytest.mark.parametrize(
    ("model", "gauge"),
    [
        (frozen, "context.summaries_frozen"),
        (lossy, "context.summaries_lossy"),
        (cut_off, None),
    ],
    ids=["frozen", "lossy", "cut-off"],
)
async def test_a_weak_compaction_model_loses_no_value_and_the_fallback_is_counted(model, gauge):
    llm = ScriptedLLM(default=model)
    runtime = AgentRuntime()
    context = ContextManager(
        llm, incremental_context_topics=(TOPIC,), topic_budget_bytes=3000
    )  # the summary guards are on by default
    runtime.register("context", context.subscriber())
    values: set[str] = set()

    def shown() -> str:
        return "\n".join(block.text for block in context.blocks("p1")).lower()

    def settled() -> bool:
        gauges = runtime.metrics().gauges
        return (
            gauges.get("context.compaction_fallbacks", 0) >= 1
            and (gauge is None or gauges.get(gauge, 0) >= 1)
            and all(value in shown() for value in values)
        )

    async with runtime:
        try:
            async with asyncio.timeout(20):
                for i in range(12):  # values that fit a summary (a quarter budget)
                    values |= salient_values(reading(i))
                    await context.update(
                        "p1",
                        TOPIC,
                        ConversationContextUpdate(reading(i)),
                        mode="incremental",
                        timestamp_us=T0 + i * SECOND,
                    )
                    await context.synced()
                # A failure is retried after the section's next entry: quiet notes (no
                # values) follow until the guards have done their work.
                for i in range(12, 80):
                    if settled():
                        break
                    await context.update(
                        "p1",
                        TOPIC,
                        ConversationContextUpdate(f"All quiet. {FILLER}"),
                        mode="incremental",
                        timestamp_us=T0 + i * SECOND,
                    )
                    await context.synced()
                assert settled(), runtime.metrics().gauges
                gauges = runtime.metrics().gauges
                missing = {value for value in values if value not in shown()}
        finally:
            await context.close()
    assert not missing
    assert gauges["context.compaction_fallbacks"] >= 1
    sent = [(request.messages[0].content, request.messages[1].content) for request in llm.requests]
    assert sent, "the model was asked"
    run = longest = 0
    for index, request in enumerate(sent):
        run = run + 1 if index and request == sent[index - 1] else 1
        longest = max(longest, run)
    assert longest <= 2


def test_summary_guards_are_on_unless_turned_off_and_reach_every_section():
    guarded = context_config(incremental_context_topics=(TOPIC,))
    assert all(s.settings.guarded for s in (guarded.dialogue, *guarded.topics))
    unguarded = context_config(incremental_context_topics=(TOPIC,), summary_guards=False)
    assert not any(s.settings.guarded for s in (unguarded.dialogue, *unguarded.topics))
    assert ContextManager(ScriptedLLM()).plan.summary_guards
    assert ContextTable().options().summary_guards
    assert ContextTable(summary_guards=False).manager_kwargs()["summary_guards"] is False
    with pytest.raises(ValueError, match="summary_guards"):
        context_config(summary_guards="yes")
