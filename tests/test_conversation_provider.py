"""The tools agent's transcript on the wire: what a provider receives, recorded by an
OpenAI-compatible server on loopback (``openai_server``) behind litellm."""

from __future__ import annotations

import pytest
from tools_doubles import never_started, turn

from xrmq.actors.models import LiteLLMService
from xrmq.actors.runtime import AgentRuntime
from xrmq.actors.tools.policy import AutoCompactor
from xrmq.actors.tools.tool_agent import ToolAgent
from xrmq.topics import VOICE_OUTPUT_TOPIC

from openai_server import OpenAIServer, Reply
from router_doubles import FakeContext


def agent_of(api_base: str, runtime: AgentRuntime) -> ToolAgent:
    llm = LiteLLMService("openai/m", api_base=api_base, api_key="sk-test", retries=0)
    return ToolAgent(
        llm,
        context=FakeContext(),
        runtime=runtime,
        output_topic=VOICE_OUTPUT_TOPIC,
        compactor=AutoCompactor(enabled=False),
    )


@pytest.mark.timeout(60)
@pytest.mark.parametrize("field", ["reasoning_content", "reasoning"])
async def test_the_models_reasoning_goes_back_verbatim_on_the_next_turn(field):
    thought = "The user asks about the mug;\n  recall: it is red. "
    with OpenAIServer(
        Reply(chunks=("The mug is red.",), reasoning=thought, reasoning_field=field),
        Reply(chunks=("Still red.",)),
    ) as server:
        async with AgentRuntime() as runtime:
            agent = agent_of(server.api_base, runtime)
            await agent.answer(turn("t1", "What colour is the mug?"), started=never_started)
            await agent.answer(turn("t2", "And now?"), started=never_started)
    second = server.requests[1].body["messages"]
    answered = [m for m in second if m["role"] == "assistant"]
    assert answered == [
        {"role": "assistant", "content": "The mug is red.", "reasoning_content": thought}
    ]
    held = agent.transcript("p1").conversation()
    assert held.messages[1] == answered[0]
