"""``LiteLLMService``: any litellm model string behind the ``LLMService`` interface.

litellm is imported on first use, with ``LITELLM_LOCAL_MODEL_COST_MAP=True`` so the
import never reaches the network; only a process that calls a real provider pays for the
import (seconds), and a call imports it on a thread, so the import never blocks the event
loop. Its version is pinned by the project (at least 1.83.10, never a release reported
compromised).
"""

from __future__ import annotations

import ast
import asyncio
import copy
import email.utils
import json
import os
import re
import socket
import sys
import time
from collections.abc import AsyncGenerator, Mapping
from types import ModuleType
from typing import Any

import msgspec

from xrmq.actors.logs import get_logger

from .errors import (
    ContextWindowExceeded,
    ModelError,
    ModelRateLimited,
    ModelRequestRejected,
    ModelTimeout,
    ModelUnavailable,
)
from .litellm_tools import ToolCallDeltas, tool_dict
from .openai_messages import message_dict
from .reasoning import reasoning_off
from .service import LLMService
from .types import ChatMessage, ChatOptions, ChatRequest, ChatResult, FinishReason, Usage
from .vision import accepts_images

REASONING_OFF: Mapping[str, Any] = {"reasoning_effort": "none"}
"""What a request with ``thinking=False`` sends to an Anthropic or Gemini reasoning model
when the service has no ``thinking_off`` of its own; other families get the lowest effort
they accept (``reasoning.reasoning_off``)."""

SDK_RETRIES_OFF: Mapping[str, Any] = {"num_retries": 0, "max_retries": 0}
"""Sent with every call: litellm's and the provider SDK's own retries are off (the OpenAI
SDK alone would try 3 times), so ``retries`` is the only retry layer."""

_FINISH_REASONS: Mapping[str, FinishReason] = {
    "length": "length",
    "content_filter": "content_filter",
}


def import_litellm() -> ModuleType:
    """Import litellm offline-safe: local cost map, no "feedback" banners on errors."""
    os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
    import litellm

    litellm.suppress_debug_info = True
    return litellm


async def _litellm_off_loop() -> ModuleType:
    """litellm, imported on a thread the first time: the import is seconds of Python (more
    on a loaded box), and on the event loop it stopped every actor of the process, its
    heartbeat and its answers to status checks included, so a router took the destination
    for dead (the turn suite's first turn on a service without ``prepare()`` failed after
    the proxy's ``liveness_s`` + ``timeout_s``). ``prepare()`` still does more: it also
    loads what litellm loads lazily on its first call."""
    if "litellm" not in sys.modules:
        await asyncio.to_thread(import_litellm)
    return import_litellm()


class LiteLLMService(LLMService):
    """Streams chat completions through ``litellm.acompletion(stream=True)``.

    ``model`` is any litellm model string (``openai/...``, ``anthropic/...``,
    ``ollama/...``, ``hosted_vllm/...`` with ``api_base`` for an OpenAI-compatible
    server). ``temperature`` and ``max_tokens`` are defaults a request's options
    override. ``timeout_s`` (a request's ``timeout_s`` overrides it) bounds the time to
    the first chunk in total, every attempt and every wait between them included, and
    then each stall between two chunks. ``retries`` is the only retry layer (the SDKs'
    own are off, ``SDK_RETRIES_OFF``): a failure before the first chunk that can pass
    (rate limit, unavailable) is retried up to ``retries`` times, after the provider's
    ``Retry-After`` when it sends one, else ``retry_backoff_s`` doubling, and only while
    the wait ends before the deadline (a 429 is then ``ModelRateLimited`` saying so, never
    a timeout); after the first chunk nothing is retried, since the consumer already has
    part of the answer. A request with ``thinking=False`` sends ``thinking_off``
    (provider parameters, e.g. ``{"reasoning_effort": "minimal"}`` or
    ``{"extra_body": {"chat_template_kwargs": {"enable_thinking": False}}}``), or, if
    that is ``None``, the lowest reasoning effort the model accepts
    (``reasoning.reasoning_off``). ``provider_options`` go to every ``acompletion``
    call unchanged. Parameters a provider does not support (temperature on some
    reasoning models) are dropped.
    """

    def __init__(
        self,
        model: str,
        *,
        api_base: str | None = None,
        api_key: str | None = None,
        timeout_s: float = 60.0,
        temperature: float | None = None,
        max_tokens: int | None = None,
        retries: int = 2,
        retry_backoff_s: float = 0.5,
        thinking_off: Mapping[str, Any] | None = None,
        **provider_options: Any,
    ) -> None:
        if not (isinstance(model, str) and model.strip()):
            raise ValueError("LiteLLMService.model: must be a non-empty litellm model string")
        if not timeout_s > 0:
            raise ValueError("LiteLLMService.timeout_s: must be positive")
        if max_tokens is not None and not max_tokens > 0:
            raise ValueError("LiteLLMService.max_tokens: must be positive")
        if temperature is not None and not 0 <= temperature <= 2:
            raise ValueError("LiteLLMService.temperature: must be between 0 and 2")
        if retries < 0:
            raise ValueError("LiteLLMService.retries: must be non-negative")
        if retry_backoff_s < 0:
            raise ValueError("LiteLLMService.retry_backoff_s: must be non-negative")
        super().__init__(model)
        self.api_base = api_base
        self.timeout_s = float(timeout_s)
        self.temperature = temperature
        self.max_tokens = max_tokens
        self.retries = retries
        self.retry_backoff_s = retry_backoff_s
        self.thinking_off = None if thinking_off is None else dict(thinking_off)
        self.provider_options = provider_options
        self._api_key = api_key
        self._log = get_logger(model=model)

    def __repr__(self) -> str:  # never shows the key
        return f"LiteLLMService({self.model!r}, api_base={self.api_base!r})"

    def prepare(self) -> None:
        """Do the first call's one-time work now: import litellm (seconds) and run one
        streamed completion on litellm's ``mock_response`` with this service's model and
        arguments (its provider mapping, parameter checks and stream wrapper load lazily
        on the first call: seconds more). Nothing reaches the network. A process calls it
        before it reports ready, so its first turn is no slower than the second."""
        litellm = import_litellm()
        request = ChatRequest((ChatMessage("user", "warm-up"),), ChatOptions(thinking=False))
        arguments = self._arguments(litellm, request, self.timeout_s)
        arguments["mock_response"] = "ok"
        try:
            for _ in litellm.completion(**arguments):
                pass
        except Exception as error:  # the first real call reports its own error
            self._log.warning("model_prepare_failed", error=repr(error))

    def _arguments(
        self, litellm: ModuleType, request: ChatRequest, timeout_s: float
    ) -> dict[str, Any]:
        options = request.options
        arguments: dict[str, Any] = dict(self.provider_options)
        arguments.update(
            model=self.model,
            messages=(
                copy.deepcopy(list(request.openai))  # verbatim; litellm may edit its input
                if request.openai
                else [message_dict(message) for message in request.messages]
            ),
            stream=True,
            stream_options={"include_usage": True},
            timeout=timeout_s,
            drop_params=True,
            **SDK_RETRIES_OFF,
        )
        for name, value in (
            ("api_base", self.api_base),
            ("api_key", self._api_key),
            ("max_tokens", options.max_tokens or self.max_tokens),
            (
                "temperature",
                self.temperature if options.temperature is None else options.temperature,
            ),
        ):
            if value is not None:
                arguments[name] = value
        if request.tools:
            arguments["tools"] = [tool_dict(tool) for tool in request.tools]
        if not options.thinking:
            if self.thinking_off is not None:
                arguments.update(self.thinking_off)
            else:
                arguments.update(reasoning_off(litellm, self.model))
        return arguments

    async def _generate(self, request: ChatRequest) -> AsyncGenerator[str | ChatResult, None]:
        litellm = await _litellm_off_loop()
        if any(message.images for message in request.messages):
            if accepts_images(litellm, self.model) is False:
                raise ModelError(
                    self.model,
                    "does not accept images (litellm's model map: supports_vision is false); "
                    "ask without the image, or route image turns to a multimodal model",
                )
        timeout_s = request.options.timeout_s or self.timeout_s
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout_s  # the first chunk's, across every attempt
        attempt = 0
        while True:
            arguments = self._arguments(litellm, request, max(deadline - loop.time(), 0.001))
            tokens = 0  # text chunks passed on
            streaming = False  # the provider answered: its stream is open
            finish: FinishReason = "stop"
            usage = Usage()
            deltas = ToolCallDeltas()
            response = None
            try:
                try:
                    async with asyncio.timeout_at(deadline):
                        response = await litellm.acompletion(**arguments)
                    streaming = True
                    chunks = aiter(response)
                    while True:
                        async with (
                            asyncio.timeout(timeout_s) if tokens else asyncio.timeout_at(deadline)
                        ):
                            chunk = await anext(chunks, None)
                        if chunk is None:
                            break
                        if getattr(chunk, "usage", None) is not None:
                            usage = reported_usage(litellm, self.model, chunk.usage)
                        if not chunk.choices:
                            continue  # the usage-only chunk that ends a stream
                        choice = chunk.choices[0]
                        if choice.finish_reason:
                            finish = _FINISH_REASONS.get(choice.finish_reason, "stop")
                        deltas.add(choice.delta)
                        text = choice.delta.content  # None on the final chunk
                        if text:
                            tokens += 1
                            yield text
                finally:
                    if response is not None:
                        await response.aclose()
            except Exception as exc:
                error = _model_error(
                    litellm,
                    self.model,
                    exc,
                    timeout_s,
                    self.api_base,
                    tokens=tokens,
                    streaming=streaming,
                )
                if not tokens and error.retryable and attempt < self.retries:
                    wait = retry_after_s(exc)
                    delay = wait if wait is not None else self.retry_backoff_s * 2**attempt
                    if loop.time() + delay < deadline:
                        attempt += 1
                        self._log.warning(
                            "model_retry", attempt=attempt, reason=error.reason, wait_s=delay
                        )
                        await asyncio.sleep(delay)
                        continue
                    if wait is not None:
                        error = type(error)(
                            self.model,
                            f"{error.reason}; the provider asks to retry after "
                            f"{wait:g} s, past the {timeout_s:g} s deadline",
                            endpoint=self.api_base,
                        )
                self._log.warning(
                    "model_failed",
                    reason=error.reason,
                    after_tokens=tokens,
                    detail=f"{type(exc).__name__}: {exc}"[:500],
                )
                raise error from exc
            yield ChatResult(
                finish, usage, deltas.tool_calls(), deltas.reasoning(), deltas.reasoning_field
            )
            return


def reported_usage(litellm: ModuleType, model: str, reported: Any) -> Usage:
    """The provider's usage chunk as ``Usage``, priced by litellm's table when it knows the
    model (a model it has no price for, such as a local one, has no cost). Once per call."""
    details = getattr(reported, "completion_tokens_details", None)
    reasoning = getattr(details, "reasoning_tokens", None) if details is not None else None
    usage = Usage(
        reported.prompt_tokens,
        reported.completion_tokens,
        getattr(reported, "total_tokens", None),
        reasoning if isinstance(reasoning, int) else None,
    )
    if usage.input_tokens is None or usage.output_tokens is None:
        return usage
    try:
        prompt_cost, completion_cost = litellm.cost_per_token(
            model=model,
            prompt_tokens=usage.input_tokens,
            completion_tokens=usage.output_tokens,
        )
        cost = float(prompt_cost) + float(completion_cost)
    except Exception:  # litellm raises when it has no price for the model
        return usage
    return msgspec.structs.replace(usage, cost_usd=cost)


def retry_after_s(exc: BaseException) -> float | None:
    """Seconds the provider asked to wait (``Retry-After``/``retry-after-ms``), or None."""
    headers: Any = getattr(exc, "litellm_response_headers", None)
    response = getattr(exc, "response", None)
    if not headers and response is not None:
        headers = getattr(response, "headers", None)
    if not headers:
        return None
    try:
        if (millis := headers.get("retry-after-ms")) is not None:
            return max(float(millis) / 1000, 0.0)
        value = headers.get("retry-after")
        if value is None:
            return None
        try:
            return max(float(value), 0.0)
        except ValueError:
            when = email.utils.parsedate_to_datetime(value)
            return max(when.timestamp() - time.time(), 0.0)
    except (TypeError, ValueError, AttributeError):
        return None


_CONNECT_FAILURES = (
    "cannot connect to host",
    "connection refused",
    "connect call failed",
    "connection error",
    "name or service not known",
    "nodename nor servname",
)
"""Texts by which litellm's wrapped exceptions say the server could not be reached at all
(litellm reports that as a connection or an internal server error, by provider)."""


def _chain(exc: BaseException) -> list[BaseException]:
    """``exc`` and every exception behind it (``__cause__``, ``__context__``), each once."""
    seen: list[BaseException] = []
    stack: list[BaseException | None] = [exc]
    while stack:
        item = stack.pop()
        if item is None or any(item is known for known in seen):
            continue
        seen.append(item)
        stack += [item.__context__, item.__cause__]
    return seen


def _unreachable(errors: Any, exc: BaseException) -> str | None:
    """What kept the server from being reached (``connection refused``, ``cannot resolve
    the host``, ``cannot connect``), or None if it was reached. The socket's own error
    behind litellm's and the SDK's wrappers says which."""
    chain = _chain(exc)
    for item in chain:
        if isinstance(item, ConnectionRefusedError):
            return "connection refused"
        if isinstance(item, socket.gaierror):
            return "cannot resolve the host"
    text = str(exc).lower()
    if "connection refused" in text or "connect call failed" in text:
        return "connection refused"
    if "name or service not known" in text or "nodename nor servname" in text:
        return "cannot resolve the host"
    if isinstance(exc, errors.APIConnectionError) or any(
        isinstance(item, ConnectionError) for item in chain
    ):
        return "cannot connect"
    if isinstance(exc, errors.InternalServerError | errors.ServiceUnavailableError) and any(
        failure in text for failure in _CONNECT_FAILURES
    ):
        return "cannot connect"
    return None


def provider_message(exc: BaseException) -> str:
    """The provider's own words in a litellm exception, without litellm's prefixes
    (``litellm.RateLimitError: RateLimitError: Hosted_vllmException - ``), the SDK's
    (``Error code: 429 - ``) or the JSON envelope (``{"error": {"message": ...}}``)."""
    text = str(getattr(exc, "message", None) or exc)
    text = text.rpartition("Exception - ")[2]
    text = re.sub(r"^Error code: \d+ - ", "", text).strip()
    body: Any = None
    if text.startswith("{"):
        for parse in (json.loads, ast.literal_eval):
            try:
                body = parse(text)
                break
            except (ValueError, SyntaxError):
                continue
    if isinstance(body, dict):  # OpenAI's {"error": {...}}, vLLM's flat one, FastAPI's
        inner = body.get("error", body)
        found = inner.get("message", inner.get("detail")) if isinstance(inner, dict) else inner
        if isinstance(found, str) and found.strip():
            text = found
    return " ".join(text.split())[:300] or type(exc).__name__


def _tokens(count: int) -> str:
    return f"{count} token" if count == 1 else f"{count} tokens"


def _model_error(
    litellm: ModuleType,
    model: str,
    exc: Exception,
    timeout_s: float,
    api_base: str | None = None,
    *,
    tokens: int = 0,
    streaming: bool = False,
) -> ModelError:
    """Map a litellm (or asyncio) exception to the ``ModelError`` family, with one clean
    reason: ``connection refused``, ``HTTP 429: <provider message>``,
    ``no token in N s``, ``stream stalled after N tokens: no token in N s``, ``stream
    dropped after N tokens``.

    ``tokens`` counts the text chunks received (one token each on an OpenAI-compatible
    server); ``streaming`` says the provider had answered and its stream was open, so a
    connection lost then is a dropped stream, never "cannot connect". litellm wraps a
    failure raised while streaming in ``MidStreamFallbackError``; the kind of failure is
    that of the exception it wraps.
    """
    errors = litellm.exceptions
    while isinstance(exc, errors.MidStreamFallbackError) and exc.original_exception is not None:
        exc = exc.original_exception

    def error(kind: type[ModelError], reason: str) -> ModelError:
        return kind(model, reason, endpoint=api_base)

    if isinstance(exc, TimeoutError | errors.Timeout):
        if tokens:
            return error(
                ModelTimeout, f"stream stalled after {_tokens(tokens)}: no token in {timeout_s:g} s"
            )
        return error(ModelTimeout, f"no token in {timeout_s:g} s")
    unreachable = _unreachable(errors, exc)
    if unreachable is not None:
        if streaming:
            return error(ModelUnavailable, f"stream dropped after {_tokens(tokens)}")
        return error(ModelUnavailable, unreachable)
    status = getattr(exc, "status_code", None)
    reason = provider_message(exc)
    if isinstance(status, int):
        reason = f"HTTP {status}: {reason}"
    if tokens:
        reason += f" (after {_tokens(tokens)})"
    if isinstance(exc, errors.ContextWindowExceededError):
        return error(ContextWindowExceeded, f"request exceeds the context window: {reason}")
    if isinstance(exc, errors.RateLimitError):
        return error(ModelRateLimited, reason)
    if isinstance(exc, errors.InternalServerError | errors.ServiceUnavailableError):
        return error(ModelUnavailable, reason)
    if isinstance(
        exc,
        errors.BadRequestError
        | errors.AuthenticationError
        | errors.PermissionDeniedError
        | errors.NotFoundError
        | errors.UnprocessableEntityError,
    ):
        return error(ModelRequestRejected, reason)
    return error(ModelError, f"{type(exc).__name__}: {reason}")
