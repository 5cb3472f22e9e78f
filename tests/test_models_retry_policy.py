"""One retry policy and reasoning off, on the requests litellm really sends (issue 17, item 2).

A faithful OpenAI-compatible server on loopback (``openai_server``) stands in for the
provider: it counts the HTTP requests, answers with status codes and ``Retry-After``
headers, streams server-sent events, and can stall. For the other provider families the
server only records the body litellm sent to it.
"""

from __future__ import annotations

import time

import pytest

from xrmq.actors.models import (
    ChatMessage,
    ChatOptions,
    LiteLLMService,
    ModelRateLimited,
    ModelTimeout,
    ModelUnavailable,
    create_llm,
    parse_model_spec,
)
from xrmq.actors.models.litellm_service import import_litellm

from openai_server import OpenAIServer, Reply

pytestmark = pytest.mark.timeout(90)  # litellm's import takes seconds on a loaded machine

QUESTION = [ChatMessage("user", "Where is the mug?")]
OFF = ChatOptions(thinking=False)


@pytest.fixture(scope="module", autouse=True)
def litellm():
    return import_litellm()


def openai_service(
    server: OpenAIServer, model: str = "openai/gpt-4o-mini", **options
) -> LiteLLMService:
    options.setdefault("retry_backoff_s", 0)
    return LiteLLMService(model, api_base=server.api_base, api_key="sk-test", **options)


async def test_one_server_error_costs_exactly_retries_plus_one_requests():
    with OpenAIServer(Reply(status=500)) as server:
        with pytest.raises(ModelUnavailable):
            await openai_service(server, retries=2).complete(QUESTION)
    assert len(server.requests) == 3  # not 3 x the OpenAI SDK's own 3 tries


async def test_without_retries_a_server_error_is_one_request():
    with OpenAIServer(Reply(status=500)) as server:
        with pytest.raises(ModelUnavailable):
            await openai_service(server, retries=0).complete(QUESTION)
    assert len(server.requests) == 1


async def test_retry_after_is_honoured_before_the_retry():
    with OpenAIServer(
        Reply(status=429, headers={"retry-after": "0.3"}), Reply(chunks=("ok",))
    ) as server:
        completion = await openai_service(server, retries=1, timeout_s=10).complete(QUESTION)
    assert completion.text == "ok"
    first, second = server.requests
    assert second.at - first.at >= 0.3


async def test_a_429_whose_retry_after_passes_the_deadline_is_rate_limited_at_once():
    with OpenAIServer(Reply(status=429, headers={"retry-after": "30"})) as server:
        began = time.monotonic()
        with pytest.raises(
            ModelRateLimited, match=r"asks to retry after 30 s, past the 2 s deadline"
        ):
            await openai_service(server, retries=3, timeout_s=2).complete(QUESTION)
        assert time.monotonic() - began < 2  # no wait for a retry that could not be made in time
    assert len(server.requests) == 1


async def test_a_429_is_rate_limited_never_a_timeout():
    with OpenAIServer(Reply(status=429, headers={"retry-after": "5"})) as server:
        with pytest.raises(ModelRateLimited):
            await openai_service(server, retries=0, timeout_s=1).complete(QUESTION)


async def test_timeout_bounds_the_time_to_the_first_chunk_across_every_attempt():
    with OpenAIServer(Reply(hang="before")) as server:
        with pytest.raises(ModelTimeout, match=r"no token in 0.5 s"):
            await openai_service(server, retries=3, timeout_s=0.5).complete(QUESTION)
    assert len(server.requests) == 1  # the deadline is spent: no attempt after it


async def test_a_stall_between_chunks_is_a_timeout_after_the_first_chunk():
    received = []
    with OpenAIServer(Reply(chunks=("first", " second"), hang="after_first")) as server:
        with pytest.raises(ModelTimeout, match=r"stream stalled after 1 token: no token in 0.5 s"):
            async for text in openai_service(server, retries=3, timeout_s=0.5).stream(QUESTION):
                received.append(text)
    assert received == ["first"] and len(server.requests) == 1


# ---------------------------------------------------------------------------- reasoning off


async def sent_body(model: str, **options) -> tuple[dict, dict]:
    """The bodies litellm sent for a compaction-like request (thinking off) and an answer."""
    with OpenAIServer(Reply(chunks=("ok",))) as server:
        llm = LiteLLMService(
            model, api_base=server.api_base, api_key="sk-test", retries=0, **options
        )
        for options_ in (OFF, ChatOptions()):
            try:
                await llm.complete(QUESTION, options_)
            # a non-OpenAI family cannot read the OpenAI reply; its request is what counts
            except Exception:
                pass
    off, on = (request.body for request in server.requests)
    return off, on


@pytest.mark.parametrize(
    ("model", "effort"),
    [
        (
            "openai/gpt-5-mini",
            "minimal",
        ),  # accepts no "none": litellm would drop it and reasoning stays on
        ("openai/gpt-5.1", "none"),
        ("openai/o4-mini", "low"),
    ],
)
async def test_openai_reasoning_models_get_the_lowest_effort_they_accept(model, effort):
    off, on = await sent_body(model)
    assert off["reasoning_effort"] == effort
    assert "reasoning_effort" not in on


async def test_an_openai_compatible_host_of_a_gpt_5_model_gets_minimal_effort():
    off, _ = await sent_body("openrouter/openai/gpt-5-mini")
    assert off["reasoning_effort"] == "minimal"


async def test_anthropic_requests_with_thinking_off_do_not_think():
    off, _ = await sent_body("anthropic/claude-sonnet-4-5")
    assert off.get("thinking", {"type": "disabled"}) == {"type": "disabled"}
    assert (
        "reasoning_effort" not in off
        and off["messages"][-1]["content"][0]["text"] == "Where is the mug?"
    )


@pytest.mark.parametrize(
    ("model", "config"),
    [
        ("gemini/gemini-2.5-flash", {"thinkingBudget": 0, "includeThoughts": False}),
    ],
)
async def test_gemini_requests_with_thinking_off_have_no_thinking_budget(model, config):
    off, on = await sent_body(model)
    assert off["generationConfig"]["thinkingConfig"] == config
    assert "thinkingConfig" not in on.get("generationConfig", {})


async def test_gemini_2_5_pro_gets_its_minimum_thinking_budget():
    off, _ = await sent_body("gemini/gemini-2.5-pro")
    budget = off["generationConfig"]["thinkingConfig"]["thinkingBudget"]
    assert 0 < budget <= 1024


async def test_the_local_preset_turns_thinking_off_in_the_chat_template():
    with OpenAIServer(Reply(chunks=("ok",))) as server:
        llm = create_llm(parse_model_spec({"preset": "local", "api_base": server.api_base}))
        await llm.complete(QUESTION, OFF)
    assert server.requests[0].body["chat_template_kwargs"] == {"enable_thinking": False}
