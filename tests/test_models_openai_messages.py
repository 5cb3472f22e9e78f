"""OpenAI's typed chat messages beside the models' ``ChatMessage`` (models/openai_messages):
a request given as typed dicts keeps them as they are for a provider speaking OpenAI's
format, and is read as ``ChatMessage`` s by a service that reads text."""

from __future__ import annotations

from typing import Any

import pytest

from xrmq.actors.models import ChatMessage, ScriptedLLM, ToolCall
from xrmq.actors.models.litellm_tools import ToolCallDeltas
from xrmq.actors.models.openai_messages import chat_message, message_dict, request_messages


def test_chat_messages_convert_both_ways_keeping_tool_calls_and_reasoning() -> None:
    messages = [
        ChatMessage("user", "q", images=("data:image/png;base64,AAAA",)),
        ChatMessage("assistant", "", tool_calls=(ToolCall("c1", "f", '{"a":1}'),), reasoning="r"),
        ChatMessage("tool", "out", tool_call_id="c1"),
    ]
    dicts = [message_dict(message) for message in messages]
    assert dicts[1] == {
        "role": "assistant",
        "content": None,
        "tool_calls": [
            {"id": "c1", "type": "function", "function": {"name": "f", "arguments": '{"a":1}'}}
        ],
        "reasoning_content": "r",
    }
    assert [chat_message(message) for message in dicts] == messages


def test_typed_dicts_go_to_the_request_as_they_are_and_are_read_as_chat_messages() -> None:
    given: list[Any] = [
        {"role": "user", "content": [{"type": "text", "text": "look"}]},
        {"role": "assistant", "content": "seen", "reasoning": "kept under the model's field"},
        ChatMessage("user", "and now?"),
    ]
    views, sent = request_messages(given)
    assert sent[:2] == tuple(given[:2]) and sent[2] == {"role": "user", "content": "and now?"}
    assert views[1] == ChatMessage("assistant", "seen", reasoning="kept under the model's field")
    assert request_messages([ChatMessage("user", "q")])[1] == ()  # no dicts: nothing kept


async def test_a_service_reading_text_gets_chat_messages_and_the_dicts_ride_along() -> None:
    llm = ScriptedLLM("ok")
    message = {"role": "user", "content": "hi", "name": "ann"}  # a field ChatMessage lacks
    await llm.complete([message])
    request = llm.requests[0]
    assert request.messages == (ChatMessage("user", "hi"),) and request.openai == (message,)


def test_a_dict_that_is_no_chat_message_is_a_clear_error() -> None:
    with pytest.raises(ValueError, match=r"ChatRequest\.messages\[1\]: must be a ChatMessage"):
        request_messages([ChatMessage("user", "q"), {"content": "no role"}])


def test_streamed_reasoning_reports_the_field_it_came_under() -> None:
    deltas = ToolCallDeltas()
    deltas.add({"reasoning": "first "})
    deltas.add({"reasoning": "then"})
    assert (deltas.reasoning(), deltas.reasoning_field) == ("first then", "reasoning")
