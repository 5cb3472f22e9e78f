"""OfflineLLM with tools: a deterministic call when the user's words match a tool, then an
answer from the tool's result; ScriptedLLM scripts tool calls and reasoning."""

from __future__ import annotations

import json

from xrmq.actors.models import (
    ChatMessage,
    OfflineLLM,
    ScriptedLLM,
    ScriptedResponse,
    ToolCall,
    ToolSpec,
)

CAMERA = ToolSpec("camera__describe_view", "Describe what the camera sees on the bench.")
STOCK = ToolSpec(
    "inventory__lookup",
    "Look up how many of an item are in stock.",
    {
        "type": "object",
        "properties": {"item": {"type": "string"}, "count": {"type": "integer"}},
        "required": ["item", "count"],
    },
)
EXTRACT = ToolSpec(
    "extract_compacted_tool_result", "Return the original content of a compacted tool result."
)
LLM = OfflineLLM(time_to_first_token_s=0, tokens_per_second=0)


async def test_the_tool_sharing_most_words_with_the_question_is_called_with_filled_arguments() -> (
    None
):
    question = [ChatMessage("user", "How many multimeters are in stock?")]
    completion = await LLM.complete(question, tools=[CAMERA, STOCK, EXTRACT])
    (call,) = completion.tool_calls
    assert call.name == "inventory__lookup" and completion.text == ""
    assert json.loads(call.arguments) == {"item": "How many multimeters are in stock?", "count": 0}
    again = await LLM.complete(question, tools=[CAMERA, STOCK, EXTRACT])
    assert again.tool_calls == completion.tool_calls  # deterministic, id included


async def test_no_matching_tool_means_a_plain_answer_and_extract_is_never_chosen_by_words() -> None:
    completion = await LLM.complete(
        [ChatMessage("user", "Return the original compacted result content.")],
        tools=[CAMERA, EXTRACT],
    )
    assert completion.tool_calls == () and completion.text


async def test_after_the_tool_result_it_answers_from_it_and_calls_nothing_more() -> None:
    call = ToolCall("c1", "camera__describe_view", "{}")
    messages = [
        ChatMessage("system", "You help."),
        ChatMessage("user", "Current time: 12:00"),
        ChatMessage("user", "What is on the bench?"),
        ChatMessage("assistant", "", tool_calls=(call,)),
        ChatMessage(
            "tool", json.dumps({"bench": ["a red multimeter", "a probe"]}), tool_call_id="c1"
        ),
    ]
    completion = await LLM.complete(messages, tools=[CAMERA])
    assert completion.tool_calls == ()
    assert completion.text == "Bench: a red multimeter, a probe."  # the tool result, quoted


async def test_scripted_tool_calls_and_reasoning_arrive_in_the_result() -> None:
    call = ToolCall("c9", "camera__describe_view", "{}")
    llm = ScriptedLLM(
        ScriptedResponse("Looking.", tool_calls=(call,), reasoning="check the camera"),
        lambda request: f"{len(request.tools)} tools offered",
    )
    first = await llm.complete([ChatMessage("user", "Bench?")], tools=[CAMERA])
    assert (first.text, first.tool_calls, first.reasoning) == (
        "Looking.",
        (call,),
        "check the camera",
    )
    second = await llm.complete([ChatMessage("user", "Bench?")], tools=[CAMERA, STOCK])
    assert second.text == "2 tools offered" and llm.requests[1].tools == (CAMERA, STOCK)


def test_tool_messages_keep_the_wire_format_of_two_field_messages() -> None:
    import msgspec

    plain = msgspec.msgpack.decode(
        msgspec.msgpack.encode({"role": "user", "content": "hi"}), type=ChatMessage
    )
    assert plain == ChatMessage("user", "hi") and plain.tool_calls == ()
    result = ChatMessage("tool", "", tool_call_id="c1")
    assert msgspec.msgpack.decode(msgspec.msgpack.encode(result), type=ChatMessage) == result


def test_tool_message_rules_name_the_field() -> None:
    import pytest

    with pytest.raises(ValueError, match=r"^ChatMessage.tool_call_id: a tool message needs one"):
        ChatMessage("tool", "x")
    with pytest.raises(
        ValueError, match=r"^ChatMessage.tool_calls: only an assistant message carries tool calls$"
    ):
        ChatMessage("user", "x", tool_calls=(ToolCall("a", "b"),))
    with pytest.raises(ValueError, match=r"^ChatMessage.content: must be non-empty text$"):
        ChatMessage("assistant", " ")
    with pytest.raises(ValueError, match=r"^ToolSpec.name: must be 1-64 letters"):
        ToolSpec("camera.describe", "x")
