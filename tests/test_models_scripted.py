"""ScriptedLLM: every scripted behaviour, and the requests it records."""

from __future__ import annotations

import asyncio

import pytest

from xrmq.actors.models import (
    ChatMessage,
    ChatOptions,
    ModelError,
    ModelRateLimited,
    ScriptedLLM,
    ScriptedResponse,
    Usage,
)

REQUEST = [ChatMessage("system", "Be brief."), ChatMessage("user", "Hello?")]


async def test_text_streams_in_word_chunks_and_requests_are_recorded() -> None:
    llm = ScriptedLLM("Hello there, Alice.")
    options = ChatOptions(max_tokens=50, thinking=False)
    async with llm.stream(REQUEST, options) as stream:
        chunks = [chunk async for chunk in stream]
    assert chunks == ["Hello", " there,", " Alice."]
    assert stream.finish_reason == "stop"
    [request] = llm.requests
    assert request.messages == tuple(REQUEST) and request.options == options


async def test_responses_play_in_queue_order_then_the_default() -> None:
    llm = ScriptedLLM("one", ScriptedResponse(chunks=("t", "wo")), default="again")
    texts = [(await llm.complete(REQUEST)).text for _ in range(4)]
    assert texts == ["one", "two", "again", "again"]
    assert llm.pending == 0


async def test_exhausted_script_raises_model_error() -> None:
    llm = ScriptedLLM("only")
    await llm.complete(REQUEST)
    with pytest.raises(ModelError, match="script exhausted after 1 responses"):
        await llm.complete(REQUEST)


async def test_delays_are_awaited_before_the_first_chunk_and_between_chunks() -> None:
    waits: list[float] = []

    async def record(seconds: float) -> None:
        waits.append(seconds)

    llm = ScriptedLLM(
        ScriptedResponse("a b c", first_chunk_delay_s=0.5, chunk_delay_s=0.1), sleep=record
    )
    assert (await llm.complete(REQUEST)).text == "a b c"
    assert waits == [0.5, 0.1, 0.1]


async def test_error_before_the_first_chunk() -> None:
    llm = ScriptedLLM(ScriptedResponse("never", error=ModelRateLimited("scripted", "slow down")))
    stream = llm.stream(REQUEST)
    with pytest.raises(ModelRateLimited):
        await anext(stream)
    assert stream.finish_reason == "error"
    assert llm.open_streams == 0


async def test_error_mid_stream_after_the_given_chunks() -> None:
    llm = ScriptedLLM(
        ScriptedResponse(
            "one two three", error=ModelError("scripted", "dropped"), error_after_chunks=2
        )
    )
    received: list[str] = []
    with pytest.raises(ModelError, match="dropped"):
        async for chunk in llm.stream(REQUEST):
            received.append(chunk)
    assert received == ["one", " two"]


async def test_cut_off_ends_with_finish_reason_length_and_reports_usage() -> None:
    llm = ScriptedLLM(ScriptedResponse("partial summ", finish_reason="length", usage=Usage(100, 2)))
    completion = await llm.complete(REQUEST)
    assert (completion.text, completion.finish_reason, completion.usage) == (
        "partial summ",
        "length",
        Usage(100, 2),
    )


async def test_empty_response_streams_nothing_and_stops() -> None:
    completion = await ScriptedLLM("").complete(REQUEST)
    assert (completion.text, completion.finish_reason) == ("", "stop")


async def test_hang_waits_until_cancelled_and_leaves_no_open_stream() -> None:
    llm = ScriptedLLM(ScriptedResponse("first", hang=True))
    got_first = asyncio.Event()

    async def consume() -> None:
        async for _ in llm.stream(REQUEST):
            got_first.set()

    task = asyncio.create_task(consume())
    await got_first.wait()
    assert llm.open_streams == 1
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert llm.open_streams == 0


async def test_closing_a_hanging_stream_ends_it_cancelled() -> None:
    llm = ScriptedLLM(ScriptedResponse("first", hang=True))
    async with llm.stream(REQUEST) as stream:
        assert await anext(stream) == "first"
    assert stream.finish_reason == "cancelled"
    assert llm.open_streams == 0


def test_inconsistent_scripts_raise_value_error_naming_the_rule() -> None:
    with pytest.raises(ValueError, match=r"ScriptedResponse.error_after_chunks: must be between 0"):
        ScriptedResponse("a b", error=ModelError("m", "x"), error_after_chunks=3)
    with pytest.raises(ValueError, match=r"ScriptedResponse.chunks: give either text or chunks"):
        ScriptedResponse("a", chunks=("a",))
    with pytest.raises(ValueError, match=r"ScriptedResponse.hang: cannot be combined with error"):
        ScriptedResponse(hang=True, error=ModelError("m", "x"))
    with pytest.raises(
        ValueError, match=r"ScriptedResponse.finish_reason: must be stop, length or content_filter"
    ):
        ScriptedResponse("a", finish_reason="error")
    with pytest.raises(
        ValueError, match=r"ScriptedResponse.first_chunk_delay_s: must be non-negative"
    ):
        ScriptedResponse("a", first_chunk_delay_s=-1)


async def test_wait_streaming_returns_once_the_model_is_generating():
    llm = ScriptedLLM(ScriptedResponse("slow start", first_chunk_delay_s=30))

    async def consume() -> None:
        async with llm.stream(REQUEST) as stream:
            async for _ in stream:
                pass

    task = asyncio.create_task(consume())
    await llm.wait_streaming()
    assert llm.open_streams == 1 and not task.done()
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert llm.open_streams == 0
