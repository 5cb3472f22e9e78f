"""A tool in another OS process, through a real broker: a timeout, an exception and a
``kill -9`` of the tool process each become an error result, and the turn still answers."""

from __future__ import annotations

import json
import os
import signal

import pytest

from xrmq.actors.models import ScriptedLLM, ScriptedResponse, ToolCall
from xrmq.actors.runtime import AgentRuntime
from xrmq.actors.tools import ToolAgent
from xrmq.schemas import AgentTurn
from xrmq.topics import VOICE_OUTPUT_TOPIC

from buses import broker_process, expect_line, python, reap
from router_doubles import FakeContext


async def never_started() -> None:
    return None


def ask(tool: str, call_id: str) -> ScriptedResponse:
    return ScriptedResponse(tool_calls=(ToolCall(call_id, f"lab__{tool}", '{"name": "kettle"}'),))


@pytest.mark.timeout(120)
async def test_timeout_exception_and_killed_tool_process_become_error_results_turns_answer() -> (
    None
):
    llm = ScriptedLLM(
        ask("reading", "c1"),
        "The kettle is at 85 degrees.",
        ask("stall", "c2"),
        "The sensor did not answer in time.",
        ask("broken", "c3"),
        "The kettle sensor is unplugged.",
        ask("reading", "c4"),
        "The lab tools are not reachable.",
    )
    with broker_process() as bus:
        server = python("tool_server.py", bus)
        try:
            expect_line(server, "ready")
            runtime = AgentRuntime(bus, name="tool-caller")
            async with runtime:
                agent = ToolAgent(
                    llm,
                    context=FakeContext(),
                    runtime=runtime,
                    output_topic=VOICE_OUTPUT_TOPIC,
                    servers=["lab"],
                    discovery_timeout_s=10,
                    tool_timeout_s=3,
                )
                answers = []
                for index, text in enumerate(
                    ["Kettle?", "Stalled sensor?", "Broken sensor?"], start=1
                ):
                    result = await agent.answer(
                        AgentTurn("p1", f"t{index}", text), started=never_started
                    )
                    answers.append(result.response)
                os.kill(server.pid, signal.SIGKILL)
                server.wait(timeout=10)
                result = await agent.answer(
                    AgentTurn("p1", "t4", "Kettle again?"), started=never_started
                )
                answers.append(result.response)
        finally:
            reap(server)
    assert answers == [
        "The kettle is at 85 degrees.",
        "The sensor did not answer in time.",
        "The kettle sensor is unplugged.",
        "The lab tools are not reachable.",
    ]
    results = [
        next(m.content for m in reversed(request.messages) if m.role == "tool")
        for request in llm.requests[1::2]
    ]
    assert json.loads(results[0]) == {"sensor": "kettle", "celsius": 85}
    assert "lab__stall: no reply within 3 s" in json.loads(results[1])["error"]
    assert json.loads(results[2]) == {
        "error": "broken failed: RuntimeError: kettle sensor unplugged"
    }
    assert "lab__reading: no reply within 3 s" in json.loads(results[3])["error"]
