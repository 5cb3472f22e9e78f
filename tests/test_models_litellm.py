"""LiteLLMService through litellm's real code path, offline.

Two seams litellm offers for this: ``mock_response`` (litellm builds a streamed mock
response, or raises a mapped error for its special strings) and a ``CustomLLM``
registered in ``litellm.custom_provider_map`` (our provider sees exactly what litellm
would send to a real one, and its generator shows whether the stream was closed).
How each kind of failure reads (issue 29, item 4) is shown against a real loopback
server (``openai_server``): refused, HTTP status, no token, stalled, dropped mid-stream.
"""

from __future__ import annotations

import asyncio
import os
import socket
import subprocess
import sys
from typing import Any

import pytest

from xrmq.actors.models import (
    REASONING_OFF,
    ChatMessage,
    ChatOptions,
    ContextWindowExceeded,
    LiteLLMService,
    ModelError,
    ModelRateLimited,
    ModelRequestRejected,
    ModelTimeout,
    ModelUnavailable,
    compaction_limit_instruction,
)
from xrmq.actors.models.litellm_service import import_litellm, provider_message

from openai_server import OpenAIServer, Reply

litellm = import_litellm()
from litellm import CustomLLM  # noqa: E402
from litellm.integrations.custom_logger import CustomLogger  # noqa: E402
from litellm.llms.custom_llm import CustomLLMError  # noqa: E402

PROVIDER = "xrmq-test-provider"

SYSTEM = ChatMessage("system", "You are a helpful assistant.")
CONTEXT = ChatMessage("user", "[14:02] camera: a red mug on the desk\nCurrent time: 14:05")
QUESTION = ChatMessage("user", "Where is the mug?")
ANSWER_REQUEST = [SYSTEM, CONTEXT, QUESTION]
COMPACTION_REQUEST = [
    ChatMessage("system", "Summarize the history. " + compaction_limit_instruction(300)),
    ChatMessage("user", "user: I am Alice.\nassistant: Hello Alice."),
]


def chunk(
    text: str, finish_reason: str = "", usage: dict[str, int] | None = None
) -> dict[str, Any]:
    return {
        "text": text,
        "is_finished": bool(finish_reason),
        "finish_reason": finish_reason,
        "usage": usage,
        "index": 0,
    }


class Provider(CustomLLM):
    """Plays one step per call, records each call, and notes how its stream ended.

    A step is a list of chunk dicts, ending with ``"hang"`` to wait until closed or
    cancelled, or an exception raised before anything is streamed. ``ended`` records
    ``"exhausted"``, ``"GeneratorExit"`` or ``"CancelledError"`` per call.
    """

    def __init__(self, *steps: list[Any] | BaseException) -> None:
        super().__init__()
        self.steps = list(steps)
        self.calls: list[dict[str, Any]] = []
        self.ended: list[str] = []
        self.waiting = asyncio.Event()

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
        self.calls.append(
            {
                "model": model,
                "messages": messages,
                "params": dict(optional_params),
                "api_base": api_base,
            }
        )
        step = self.steps.pop(0)
        if isinstance(step, BaseException):
            raise step
        try:
            for item in step:
                if item == "hang":
                    self.waiting.set()
                    await asyncio.Event().wait()
                elif isinstance(item, BaseException):
                    raise item
                else:
                    yield item
            self.ended.append("exhausted")
        except GeneratorExit:
            self.ended.append("GeneratorExit")
            raise
        except asyncio.CancelledError:
            self.ended.append("CancelledError")
            raise


@pytest.fixture
def provider_map(monkeypatch: pytest.MonkeyPatch):
    def register(provider: Provider) -> Provider:
        monkeypatch.setattr(
            litellm, "custom_provider_map", [{"provider": PROVIDER, "custom_handler": provider}]
        )
        return provider

    return register


def service(**options: Any) -> LiteLLMService:
    options.setdefault("retry_backoff_s", 0)
    return LiteLLMService(f"{PROVIDER}/m", **options)


async def test_mock_response_streams_chunks_in_order_then_finish_reason_and_usage() -> None:
    llm = LiteLLMService("openai/gpt-4o-mini", mock_response="The red mug is on the desk.")
    chunks = []
    async with llm.stream(ANSWER_REQUEST) as stream:
        assert stream.result is None
        async for text in stream:
            chunks.append(text)
    assert len(chunks) > 1
    assert "".join(chunks) == "The red mug is on the desk."
    assert all(chunks), "the empty-content final chunk is not passed on"
    assert stream.finish_reason == "stop"
    assert stream.usage is not None and stream.usage.input_tokens and stream.usage.output_tokens


async def test_mock_response_complete_collects_the_whole_text() -> None:
    llm = LiteLLMService("openai/gpt-4o-mini", mock_response="Hello there.")
    completion = await llm.complete(ANSWER_REQUEST)
    assert (completion.text, completion.finish_reason) == ("Hello there.", "stop")


@pytest.mark.parametrize(
    ("mock", "error_type"),
    [
        ("litellm.RateLimitError", ModelRateLimited),
        ("litellm.ContextWindowExceededError", ContextWindowExceeded),
        ("litellm.InternalServerError", ModelUnavailable),
    ],
)
async def test_mocked_litellm_errors_map_to_the_documented_exceptions(
    mock: str, error_type: type
) -> None:
    llm = LiteLLMService("openai/gpt-4o-mini", mock_response=mock, retries=0)
    stream = llm.stream(ANSWER_REQUEST)
    with pytest.raises(error_type) as raised:
        async for _ in stream:
            pass
    assert getattr(raised.value, "model", None) == "openai/gpt-4o-mini"
    assert str(raised.value).startswith("model openai/gpt-4o-mini: ")
    assert stream.finish_reason == "error"


async def test_mocked_timeout_maps_to_model_timeout() -> None:
    llm = LiteLLMService(
        "openai/gpt-4o-mini", mock_response="x", mock_timeout=True, retries=0, timeout_s=0.05
    )
    with pytest.raises(ModelTimeout):
        await llm.complete(ANSWER_REQUEST)


async def test_custom_provider_receives_exact_messages_and_options(provider_map) -> None:
    provider = provider_map(
        Provider(
            [
                chunk("From "),
                chunk("what I have."),
                chunk("", "stop", {"prompt_tokens": 31, "completion_tokens": 4}),
            ]
        )
    )
    llm = service(api_base="http://127.0.0.1:9/v1", temperature=0.3, max_tokens=200)
    completion = await llm.complete(ANSWER_REQUEST, ChatOptions(max_tokens=64))
    assert completion.text == "From what I have."
    assert completion.usage.input_tokens == 31 and completion.usage.output_tokens == 4
    [call] = provider.calls
    assert call["messages"] == [
        {"role": "system", "content": SYSTEM.content},
        {"role": "user", "content": CONTEXT.content},
        {"role": "user", "content": QUESTION.content},
    ]
    assert call["params"]["max_tokens"] == 64  # the request's option beats the service default
    assert call["params"]["temperature"] == 0.3
    assert call["api_base"] == "http://127.0.0.1:9/v1"
    assert provider.ended == ["exhausted"]


async def test_thinking_off_parameters_go_only_with_requests_that_disable_thinking(
    provider_map,
) -> None:
    steps = [[chunk("ok", "stop")] for _ in range(2)]
    provider = provider_map(Provider(*steps))
    thinking_off = {"extra_body": {"chat_template_kwargs": {"enable_thinking": False}}}
    llm = service(thinking_off=thinking_off)
    await llm.complete(COMPACTION_REQUEST, ChatOptions(thinking=False))
    await llm.complete(ANSWER_REQUEST)
    compaction, answer = provider.calls
    assert compaction["messages"][0]["content"].endswith(compaction_limit_instruction(300))
    assert compaction["params"]["extra_body"] == thinking_off["extra_body"]
    assert "extra_body" not in answer["params"]


class ParamsLogger(CustomLogger):
    def __init__(self) -> None:
        super().__init__()
        self.params: list[dict[str, Any]] = []

    def log_pre_api_call(self, model, messages, kwargs):
        self.params.append(dict(kwargs["optional_params"]))


@pytest.mark.parametrize(
    ("model", "expected"),
    [("anthropic/claude-sonnet-4-5", REASONING_OFF), ("openai/gpt-4o-mini", {})],
)
async def test_thinking_off_defaults_to_reasoning_effort_none_only_on_reasoning_models(
    monkeypatch: pytest.MonkeyPatch, model: str, expected: dict[str, str]
) -> None:
    logger = ParamsLogger()
    monkeypatch.setattr(litellm, "callbacks", [logger])
    llm = LiteLLMService(model, mock_response="ok")
    await llm.complete(COMPACTION_REQUEST, ChatOptions(thinking=False))
    await llm.complete(ANSWER_REQUEST)
    off, on = logger.params
    assert {key: off[key] for key in off if key == "reasoning_effort"} == expected
    assert "reasoning_effort" not in on


async def test_cancelling_the_consumer_mid_stream_closes_the_provider_stream(provider_map) -> None:
    provider = provider_map(Provider([chunk("first "), "hang"]))
    llm = service()
    received: list[str] = []

    async def consume() -> None:
        async for text in llm.stream(ANSWER_REQUEST):
            received.append(text)

    task = asyncio.create_task(consume())
    await provider.waiting.wait()
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert received == ["first "]
    assert provider.ended == ["CancelledError"]


async def test_leaving_the_stream_block_early_closes_the_provider_generator(provider_map) -> None:
    provider = provider_map(Provider([chunk("one "), chunk("two "), chunk("three", "stop")]))
    async with service().stream(ANSWER_REQUEST) as stream:
        async for text in stream:
            assert text == "one "
            break
    assert provider.ended == ["GeneratorExit"]
    assert stream.finish_reason == "cancelled"


async def test_failure_before_the_first_chunk_is_retried(provider_map) -> None:
    provider = provider_map(
        Provider(CustomLLMError(status_code=429, message="slow down"), [chunk("ok", "stop")])
    )
    completion = await service(retries=1).complete(ANSWER_REQUEST)
    assert completion.text == "ok"
    assert len(provider.calls) == 2


async def test_retries_are_bounded_and_the_last_error_surfaces(provider_map) -> None:
    provider = provider_map(
        Provider(*[CustomLLMError(status_code=503, message="down") for _ in range(3)])
    )
    with pytest.raises(ModelUnavailable, match="down"):
        await service(retries=2).complete(ANSWER_REQUEST)
    assert len(provider.calls) == 3


async def test_failure_after_the_first_chunk_is_not_retried(provider_map) -> None:
    provider = provider_map(
        Provider([chunk("partial "), CustomLLMError(status_code=503, message="dropped")])
    )
    received: list[str] = []
    with pytest.raises(ModelUnavailable, match="dropped"):
        async for text in service(retries=3).stream(ANSWER_REQUEST):
            received.append(text)
    assert received == ["partial "]
    assert len(provider.calls) == 1


async def test_rejected_request_is_not_retried(provider_map) -> None:
    provider = provider_map(Provider(CustomLLMError(status_code=400, message="bad field")))
    with pytest.raises(ModelRequestRejected, match="bad field"):
        await service(retries=3).complete(ANSWER_REQUEST)
    assert len(provider.calls) == 1


async def test_provider_cut_off_surfaces_as_finish_reason_length(provider_map) -> None:
    provider_map(Provider([chunk("a long "), chunk("answer", "length")]))
    completion = await service().complete(ANSWER_REQUEST)
    assert (completion.text, completion.finish_reason) == ("a long answer", "length")


async def test_no_first_chunk_within_the_request_timeout_raises_model_timeout(provider_map) -> None:
    # The first call warms litellm's lazy imports, which alone can outlast the timeout
    # (a cold process, a loaded box): the second must reach the provider and be cancelled.
    provider = provider_map(Provider([chunk("warm", "stop")], ["hang"]))
    model = service(retries=0, timeout_s=30)
    await model.complete(ANSWER_REQUEST)
    with pytest.raises(ModelTimeout, match="no token in 0.5 s"):
        await model.complete(ANSWER_REQUEST, ChatOptions(timeout_s=0.5))
    assert provider.ended == ["exhausted", "CancelledError"]


def test_every_failure_is_a_model_error() -> None:
    for error_type in (
        ModelTimeout,
        ModelRateLimited,
        ModelUnavailable,
        ContextWindowExceeded,
        ModelRequestRejected,
    ):
        assert issubclass(error_type, ModelError)
    assert ModelRateLimited.retryable and not ContextWindowExceeded.retryable


def test_invalid_service_settings_raise_value_error_naming_the_rule() -> None:
    with pytest.raises(ValueError, match=r"LiteLLMService.timeout_s: must be positive"):
        LiteLLMService("openai/x", timeout_s=0)
    with pytest.raises(ValueError, match=r"LiteLLMService.model: must be a non-empty"):
        LiteLLMService(" ")


def test_importing_the_models_package_does_not_import_litellm() -> None:
    code = "import sys, xrmq.actors.models; print('litellm' in sys.modules)"
    env = {key: value for key, value in os.environ.items() if key != "LITELLM_LOCAL_MODEL_COST_MAP"}
    out = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        check=True,
        env=env,
        timeout=30,
    )
    assert out.stdout.strip() == "False"


# ------------------------------------------- one clean line per kind of failure (issue 29, 4)

FAMILIES = ("hosted_vllm/m", "openai/m")
"""litellm reaches an OpenAI-compatible server through aiohttp (hosted_vllm) or the
OpenAI SDK's httpx (openai); each words its failures its own way."""


async def failure(model: str, api_base: str, **options: Any) -> tuple[ModelError, list[str]]:
    """The error a streamed answer from ``api_base`` ends with, and the text received first."""
    options.setdefault("retries", 0)
    llm = LiteLLMService(model, api_base=api_base, api_key="sk-test", **options)
    received: list[str] = []
    with pytest.raises(ModelError) as raised:
        async for text in llm.stream(ANSWER_REQUEST):
            received.append(text)
    return raised.value, received


def assert_clean(error: ModelError) -> None:
    """One line with no provider repr in it."""
    text = str(error)
    assert "\n" not in text and "litellm" not in text and "Exception" not in text, text
    assert " object at 0x" not in text and "{" not in text, text


@pytest.mark.timeout(60)
@pytest.mark.parametrize("model", FAMILIES)
async def test_a_refused_connection_reads_model_at_endpoint_connection_refused(model):
    with socket.socket() as sock:  # bound, not listening: connections are refused
        sock.bind(("127.0.0.1", 0))
        api_base = f"http://127.0.0.1:{sock.getsockname()[1]}/v1"
        error, _ = await failure(model, api_base)
    assert isinstance(error, ModelUnavailable)
    assert str(error) == f"model {model} at {api_base}: connection refused"
    assert_clean(error)


@pytest.mark.timeout(60)
@pytest.mark.parametrize("model", FAMILIES)
@pytest.mark.parametrize(
    ("status", "message", "kind"),
    [
        (429, "Too many requests, slow down", ModelRateLimited),
        (503, "the model is overloaded", ModelUnavailable),
        (400, "max_tokens is too large", ModelRequestRejected),
    ],
)
async def test_an_http_error_reads_its_status_and_the_providers_message(
    model, status, message, kind
):
    with OpenAIServer(Reply(status=status, message=message)) as server:
        error, _ = await failure(model, server.api_base)
    assert isinstance(error, kind)
    assert str(error) == f"model {model} at {server.api_base}: HTTP {status}: {message}"
    assert_clean(error)


@pytest.mark.timeout(60)
@pytest.mark.parametrize("model", FAMILIES)
async def test_a_server_that_accepts_and_never_sends_reads_no_token_in_n_s(model):
    with OpenAIServer(Reply(hang="before")) as server:
        error, _ = await failure(model, server.api_base, timeout_s=0.5)
    assert isinstance(error, ModelTimeout)
    assert str(error) == f"model {model} at {server.api_base}: no token in 0.5 s"


@pytest.mark.timeout(60)
@pytest.mark.parametrize("model", FAMILIES)
async def test_a_stream_that_stalls_reads_stalled_after_n_tokens(model):
    with OpenAIServer(Reply(chunks=("one", " two"), hang="after_first")) as server:
        error, received = await failure(model, server.api_base, timeout_s=0.5)
    assert received == ["one"]
    assert isinstance(error, ModelTimeout)
    assert str(error) == (
        f"model {model} at {server.api_base}: stream stalled after 1 token: no token in 0.5 s"
    )


@pytest.mark.timeout(60)
@pytest.mark.parametrize("model", FAMILIES)
async def test_a_stream_cut_mid_answer_reads_dropped_after_n_tokens_never_cannot_connect(model):
    with OpenAIServer(Reply(chunks=("one", " two", " three", " four"), drop_after=2)) as server:
        error, received = await failure(model, server.api_base, retries=3)
    assert received == ["one", " two"]
    assert isinstance(error, ModelUnavailable)
    assert str(error) == f"model {model} at {server.api_base}: stream dropped after 2 tokens"
    assert len(server.requests) == 1  # part of the answer was out: never retried


def test_a_model_error_without_an_endpoint_reads_model_then_reason() -> None:
    assert str(ModelTimeout("m", "no token in 3 s")) == "model m: no token in 3 s"
    error = ModelTimeout("m", "no token in 3 s", endpoint="http://h/v1")
    assert str(error) == "model m at http://h/v1: no token in 3 s"
    assert (error.model, error.endpoint, error.reason) == ("m", "http://h/v1", "no token in 3 s")


@pytest.mark.parametrize(
    "text",
    [
        'litellm.BadRequestError: Hosted_vllmException - {"error": {"message": "too long"}}',
        'litellm.BadRequestError: Hosted_vllmException - {"object": "error", "message": '
        '"too long", "type": "BadRequestError"}',
        'litellm.BadRequestError: OpenAIException - {"detail": "too long"}',
        "litellm.BadRequestError: OpenAIException - Error code: 400 - {'error': "
        "{'message': 'too long', 'code': 400}}",
        "litellm.BadRequestError: OpenAIException - too long",
    ],
)
def test_the_providers_message_is_found_in_every_wrapping(text: str) -> None:
    assert provider_message(Exception(text)) == "too long"
