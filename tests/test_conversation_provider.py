"""The tools agent's transcript on the wire: what a provider receives, recorded by an
OpenAI-compatible server on loopback (``openai_server``) behind litellm: reasoning goes
back verbatim, an image turn is an ``image_url`` block, a model that takes no images
fails the turn clearly."""

from __future__ import annotations

import pytest
from tools_doubles import never_started, turn

from xrmq.actors.models import ChatMessage, LiteLLMService, ModelError
from xrmq.actors.runtime import AgentRuntime
from xrmq.actors.tools.policy import AutoCompactor
from xrmq.actors.tools.tool_agent import ToolAgent
from xrmq.schemas import AgentTurn, UserQuery
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
    held = agent.transcript("p1").conversation  # the state the agent holds
    assert held.messages[1] == answered[0]


PIXEL = (
    "data:image/png;base64,iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mP8z8BQDwAE"
    "hQGAhKmMIQAAAABJRU5ErkJggg=="
)


@pytest.mark.timeout(60)
async def test_an_image_turn_reaches_the_provider_as_an_image_url_block():
    with OpenAIServer(Reply(chunks=("A red dot.",)), Reply(chunks=("Still a dot.",))) as server:
        async with AgentRuntime() as runtime:
            agent = agent_of(server.api_base, runtime)
            looked = AgentTurn("p1", "t1", "What is this?", timestamp_us=1, images=(PIXEL,))
            await agent.answer(looked, started=never_started)
            await agent.answer(turn("t2", "And its colour?"), started=never_started)
    for request in server.requests:  # the image stays in the transcript for the next turn
        asked = [m for m in request.body["messages"] if m["role"] == "user"][1]
        assert asked["content"] == [
            {"type": "text", "text": "What is this?"},
            {"type": "image_url", "image_url": {"url": PIXEL}},
        ]


@pytest.mark.timeout(60)
async def test_a_server_refusing_images_fails_the_turn_with_its_reason():
    refusal = "Invalid content type. image_url is only supported by certain models."
    with OpenAIServer(Reply(status=400, message=refusal)) as server:
        async with AgentRuntime() as runtime:
            agent = agent_of(server.api_base, runtime)
            looked = AgentTurn("p1", "t1", "What is this?", timestamp_us=1, images=(PIXEL,))
            with pytest.raises(ModelError, match="image_url is only supported by certain models"):
                await agent.answer(looked, started=never_started)
    assert agent.transcript("p1").messages == []  # the failed turn recorded nothing


async def test_a_model_litellm_knows_as_text_only_refuses_an_image_before_any_request():
    llm = LiteLLMService("openai/gpt-3.5-turbo", api_base="http://127.0.0.1:9/v1", api_key="x")
    request = [ChatMessage("user", "What is this?", images=(PIXEL,))]
    with pytest.raises(ModelError, match=r"gpt-3\.5-turbo: does not accept images"):
        async for _ in llm.stream(request):
            pass


def test_an_image_must_be_a_data_or_http_url():
    with pytest.raises(ValueError, match=r"UserQuery\.images: each must be a data:image/ URL"):
        UserQuery("look", 1, images=("file:///etc/passwd",))
    with pytest.raises(ValueError, match=r"ChatMessage\.images: only a user message"):
        ChatMessage("assistant", "x", images=(PIXEL,))
