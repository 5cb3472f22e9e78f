"""docs/tools.md's counters per tier of a tools destination in the runtime's metrics and in
``xrmq top`` (gauges ``tools.NAME.<counter>``, on a line of their own)."""

from __future__ import annotations

import pytest
from tools_doubles import Probe, never_started, probe_reading, session_model, turn

from xrmq.actors.edge.top import TopView, render
from xrmq.actors.runtime import AgentRuntime
from xrmq.actors.tools.control import CompactServer
from xrmq.actors.tools.policy import AutoCompactor
from xrmq.actors.tools.tool import Tool
from xrmq.actors.tools.tool_agent import ToolAgent
from xrmq.topics import VOICE_OUTPUT_TOPIC

from buses import broker_process, top_once_json
from router_doubles import FakeContext

pytestmark = pytest.mark.timeout(90)


def failing_summary(head, previous):
    async def none() -> None:
        return None

    return none()


@pytest.mark.timeout(90)
async def test_tier_counters_are_gauges_of_the_tools_destination_and_top_shows_them():
    with broker_process() as bus:
        runtime = AgentRuntime(bus, name="tools-box", metrics_interval=0.05)
        agent = ToolAgent(
            session_model(),
            context=FakeContext(),
            runtime=runtime,
            output_topic=VOICE_OUTPUT_TOPIC,
            tools=[Tool("probe", "Read a probe.", Probe, probe_reading)],
            compactor=AutoCompactor(enabled=False),
            summarize=failing_summary,
        )
        runtime.register("lab-tools-compact", CompactServer("lab-tools", agent))
        async with runtime:
            for index in range(1, 15):
                await agent.answer(turn(f"t{index}", f"Read probe {index}."), started=never_started)
            await agent.compact("p1", tier="toolcall")
            await agent.compact("p1", tier="toolcall")  # nothing more to reclaim
            await agent.compact("p1", tier="summary")  # the summarizer fails
            metrics = runtime.metrics()
            gauges = metrics.gauges
            rows = await top_once_json(bus)
    expected = {
        "toolcall_rounds_total": 2,
        "toolcall_reclaimed": 2,
        "summary_rounds": 0,
        "nothing_to_condense": 0,
        "summarize_failed": 1,
        "originals_evicted": 0,
    }
    assert agent.tier_counters() == expected
    assert {k: v for k, v in gauges.items() if k.startswith("tools.lab-tools.")} == {
        f"tools.lab-tools.{name}": value for name, value in expected.items()
    }
    [row] = [row for row in rows if row["runtime"] == "tools-box"]
    assert row["gauges"]["tools.lab-tools.toolcall_reclaimed"] == 2
    assert row["gauges"]["tools.lab-tools.summarize_failed"] == 1
    view = TopView()
    view.observe(metrics, received_at=0.0)
    text = render(view.rows(now=0.0), color=False)
    assert (
        "  tools lab-tools compaction: tier 1 rounds 2  reclaimed 2  tier 2 summaries 0  "
        "nothing to condense 0  summarize failed 1  originals evicted 0"
    ) in text.splitlines()
    assert "tools.lab-tools." not in text


async def test_automatic_compaction_is_counted_per_tier_as_well():
    runtime = AgentRuntime()
    async with runtime:
        agent = ToolAgent(
            session_model(),
            context=FakeContext(),
            runtime=runtime,
            output_topic=VOICE_OUTPUT_TOPIC,
            tools=[Tool("probe", "Read a probe.", Probe, probe_reading)],
            compactor=AutoCompactor(token_threshold=6_000),
            summarize=failing_summary,
        )
        for index in range(1, 31):
            await agent.answer(turn(f"t{index}", f"Read probe {index}."), started=never_started)
    counters = agent.tier_counters()
    held = agent.transcript("p1").counters
    assert counters["toolcall_rounds_total"] == held.toolcall_rounds_total > 0
    assert counters["toolcall_reclaimed"] == held.toolcall_reclaimed > 0
    assert counters["summarize_failed"] == held.summarize_failed
