"""LiteLLMService with tools, offline through litellm's own seam: a ``CustomLLM`` provider.

The provider sees what litellm would send a real one (the tools in OpenAI's format, the
assistant tool calls and tool results of the transcript) and streams tool calls the way
providers do, in pieces: id and name first, the argument string in fragments.
"""

from __future__ import annotations

from typing import Any

import pytest

from xrmq.actors.models import ChatMessage, LiteLLMService, ToolCall, ToolSpec
from xrmq.actors.models.litellm_service import import_litellm

litellm = import_litellm()
from litellm import CustomLLM  # noqa: E402

PROVIDER = "xrmq-tools-provider"

TOOL = ToolSpec(
    "camera__describe_view",
    "Describe the view.",
    {"type": "object", "properties": {"focus": {"type": "string"}}, "required": ["focus"]},
)


def piece(
    index: int, *, call_id: str | None = None, name: str | None = None, arguments: str = ""
) -> dict[str, Any]:
    return {
        "text": "",
        "is_finished": False,
        "finish_reason": "",
        "usage": None,
        "index": 0,
        "tool_use": {
            "index": index,
            "id": call_id,
            "type": "function",
            "function": {"name": name, "arguments": arguments},
        },
    }


def end(finish_reason: str) -> dict[str, Any]:
    return {
        "text": "",
        "is_finished": True,
        "finish_reason": finish_reason,
        "index": 0,
        "usage": {"prompt_tokens": 40, "completion_tokens": 12, "total_tokens": 52},
    }


class Provider(CustomLLM):
    def __init__(self, *steps: list[dict[str, Any]]) -> None:
        super().__init__()
        self.steps = list(steps)
        self.calls: list[dict[str, Any]] = []

    async def astreaming(
        self,
        model,
        messages,
        api_base,
        custom_prompt_dict,
        model_response,
        print_verbose,
        encoding,
        api_key,
        logging_obj,
        optional_params,
        **kwargs,
    ):
        self.calls.append({"messages": messages, "params": dict(optional_params)})
        for item in self.steps.pop(0):
            yield item


@pytest.fixture
def provider(monkeypatch: pytest.MonkeyPatch) -> Provider:
    handler = Provider(
        [
            piece(0, call_id="call_a", name="camera__describe_view", arguments='{"fo'),
            piece(0, arguments='cus": "bench"}'),
            piece(1, call_id="call_b", name="camera__describe_view", arguments='{"focus": "door"}'),
            end("tool_calls"),
        ],
        [
            {
                "text": "A red multimeter.",
                "is_finished": True,
                "finish_reason": "stop",
                "index": 0,
                "usage": None,
            }
        ],
    )
    monkeypatch.setattr(
        litellm, "custom_provider_map", [{"provider": PROVIDER, "custom_handler": handler}]
    )
    return handler


async def test_tools_are_passed_and_streamed_tool_calls_are_assembled(provider: Provider) -> None:
    llm = LiteLLMService(f"{PROVIDER}/m", retry_backoff_s=0)
    question = [ChatMessage("user", "What is on the bench?")]
    completion = await llm.complete(question, tools=[TOOL])
    assert completion.tool_calls == (
        ToolCall("call_a", "camera__describe_view", '{"focus": "bench"}'),
        ToolCall("call_b", "camera__describe_view", '{"focus": "door"}'),
    )
    assert completion.text == "" and completion.finish_reason == "stop"
    assert completion.usage.total == 52
    (first,) = provider.calls[:1]
    assert first["params"]["tools"] == [
        {
            "type": "function",
            "function": {
                "name": "camera__describe_view",
                "description": "Describe the view.",
                "parameters": TOOL.parameters,
            },
        }
    ]


async def test_the_transcript_reaches_the_provider_in_openai_format(provider: Provider) -> None:
    llm = LiteLLMService(f"{PROVIDER}/m", retry_backoff_s=0)
    await llm.complete([ChatMessage("user", "What is on the bench?")], tools=[TOOL])
    calls = (ToolCall("call_a", "camera__describe_view", '{"focus": "bench"}'),)
    transcript = [
        ChatMessage("user", "What is on the bench?"),
        ChatMessage("assistant", "", tool_calls=calls, reasoning="look first"),
        ChatMessage("tool", '{"bench": "a red multimeter"}', tool_call_id="call_a"),
    ]
    completion = await llm.complete(transcript, tools=[TOOL])
    assert completion.text == "A red multimeter." and completion.tool_calls == ()
    sent = provider.calls[1]["messages"]
    assert sent[1]["role"] == "assistant" and sent[1]["tool_calls"] == [
        {
            "id": "call_a",
            "type": "function",
            "function": {"name": "camera__describe_view", "arguments": '{"focus": "bench"}'},
        }
    ]
    assert sent[1]["reasoning_content"] == "look first"
    assert sent[2] == {
        "role": "tool",
        "content": '{"bench": "a red multimeter"}',
        "tool_call_id": "call_a",
    }
