"""``/compact toolcall`` typed into ``xrmq chat``'s loop compacts the participant's tool
transcript at the tools destination, over the bus."""

from __future__ import annotations

import io

import pytest
from tools_doubles import Probe, never_started, probe_reading, session_model, turn

from xrmq.actors.edge.chat import chat
from xrmq.actors.runtime import AgentRuntime
from xrmq.actors.tools.control import CompactServer
from xrmq.actors.tools.policy import AutoCompactor
from xrmq.actors.tools.tool import Tool
from xrmq.actors.tools.tool_agent import ToolAgent
from xrmq.topics import VOICE_OUTPUT_TOPIC

from buses import broker_process
from router_doubles import FakeContext


@pytest.mark.timeout(60)
async def test_slash_compact_toolcall_typed_in_chat_reclaims_at_the_named_destination():
    with broker_process() as bus:
        runtime = AgentRuntime(bus, name="tools-box")
        agent = ToolAgent(
            session_model(),
            context=FakeContext(),
            runtime=runtime,
            output_topic=VOICE_OUTPUT_TOPIC,
            tools=[Tool("probe", "Read a probe.", Probe, probe_reading)],
            compactor=AutoCompactor(enabled=False),
        )
        runtime.register("lab-tools-compact", CompactServer("lab-tools", agent))
        async with runtime:
            for index in range(1, 15):
                await agent.answer(turn(f"t{index}", f"Read probe {index}."), started=never_started)
            out = io.StringIO()
            code = await chat(
                bus,
                "p1",
                timeout=10,
                out=out,
                stdin=io.StringIO("/compact toolcall lab-tools\n/quit\n"),
            )
    assert code == 0
    assert "xrmq chat: compacted tool results at lab-tools: 2 reclaimed (" in out.getvalue()
    assert agent.tier_counters()["toolcall_reclaimed"] == 2
