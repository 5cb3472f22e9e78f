"""Request validation and the stream contract every LLMService shares."""

from __future__ import annotations

from collections.abc import AsyncGenerator

import msgspec
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from xrmq.actors.models import (
    ChatMessage,
    ChatOptions,
    ChatRequest,
    ChatResult,
    LLMService,
    ScriptedLLM,
)
from xrmq.actors.models.chunking import word_chunks

REQUEST = [ChatMessage("user", "Hello?")]


def test_empty_message_list_raises_value_error() -> None:
    llm = ScriptedLLM("unused")
    with pytest.raises(ValueError, match=r"^ChatRequest.messages: must not be empty$"):
        llm.stream([])
    assert llm.requests == []


def test_unknown_role_raises_value_error() -> None:
    with pytest.raises(
        ValueError, match=r"^ChatMessage.role: must be one of system, user, assistant, tool$"
    ):
        ChatMessage("robot", "x")  # type: ignore[arg-type]


def test_unknown_role_is_rejected_when_decoded_too() -> None:
    with pytest.raises(msgspec.ValidationError):
        msgspec.json.decode(b'{"role": "robot", "content": "x"}', type=ChatMessage)


@pytest.mark.parametrize("max_tokens", [0, -5])
def test_non_positive_max_tokens_raises_value_error(max_tokens: int) -> None:
    with pytest.raises(ValueError, match=r"^ChatOptions.max_tokens: must be positive$"):
        ChatOptions(max_tokens=max_tokens)


def test_blank_content_and_out_of_range_options_raise_value_error() -> None:
    with pytest.raises(ValueError, match=r"^ChatMessage.content: must be non-empty text$"):
        ChatMessage("user", "  ")
    with pytest.raises(ValueError, match=r"^ChatOptions.temperature: must be between 0 and 2$"):
        ChatOptions(temperature=3)
    with pytest.raises(ValueError, match=r"^ChatOptions.timeout_s: must be positive$"):
        ChatOptions(timeout_s=0)
    with pytest.raises(ValueError, match=r"^ChatRequest.messages\[1\]: must be a ChatMessage$"):
        ChatRequest((ChatMessage("user", "a"), {"role": "user", "content": "b"}))  # type: ignore[arg-type]


class Echo(LLMService):
    """A user-written service: yields text only, no ChatResult."""

    def __init__(self) -> None:
        super().__init__("echo")

    async def _generate(self, request: ChatRequest) -> AsyncGenerator[str | ChatResult, None]:
        yield request.messages[-1].content
        yield ""  # empty chunks are not passed on


async def test_a_service_that_yields_no_result_finishes_with_stop() -> None:
    async with Echo().stream(REQUEST) as stream:
        assert [chunk async for chunk in stream] == ["Hello?"]
    assert stream.result == ChatResult("stop")


async def test_result_is_none_until_the_stream_ends_and_iteration_then_stays_finished() -> None:
    stream = ScriptedLLM("a b").stream(REQUEST)
    assert stream.result is None and stream.finish_reason is None and stream.usage is None
    assert [chunk async for chunk in stream] == ["a", " b"]
    assert stream.finish_reason == "stop"
    assert [chunk async for chunk in stream] == []
    await stream.aclose()
    assert stream.finish_reason == "stop"  # closing a finished stream does not change it


@settings(max_examples=300, deadline=None)
@given(st.text(max_size=200))
def test_word_chunks_rejoin_to_the_original_text_with_one_word_each(text: str) -> None:
    chunks = word_chunks(text)
    assert "".join(chunks) == text
    assert all(len(chunk.split()) <= 1 for chunk in chunks)
