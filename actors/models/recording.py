"""Model calls on record: a JSONL log of every call, and a model that replays one.

``RecordingLLM`` wraps any ``LLMService`` and appends one ``CallRecord`` per finished
call (request messages and options, the whole response text, finish reason, usage and
latency) to a ``CallLog``. ``ReplayLLM`` answers from such records with no model at all:
a request gets the response recorded for an identical request (same messages and
options, the ``request_key``), in recorded order when one request was made more than
once. So a run that logged its calls can be re-run, scored and inspected offline, and
gives the same result as long as the code asks the same questions.
"""

from __future__ import annotations

import hashlib
import time
from collections import deque
from collections.abc import AsyncGenerator, Iterable
from pathlib import Path
from typing import IO, Any

import msgspec

from .errors import ModelError
from .service import LLMService
from .types import ChatMessage, ChatOptions, ChatRequest, ChatResult, FinishReason, Usage


class CallRecord(msgspec.Struct, frozen=True, kw_only=True):
    """One model call as logged: what was asked and what came back."""

    type: str = "call"
    service: str
    """The caller's label for the model (``answers``, ``compaction``...)."""
    model: str
    key: str
    """``request_key`` of the request, for replay."""
    messages: list[ChatMessage]
    options: ChatOptions
    text: str
    finish_reason: FinishReason
    usage: Usage = Usage()
    latency_s: float
    """From the request to the end of the response."""
    error: str | None = None
    """``Type: message`` of a ``ModelError`` the call raised (``finish_reason`` is then
    ``error``)."""


def request_key(request: ChatRequest) -> str:
    """A stable digest of a request's messages and options."""
    encoded = msgspec.json.encode([request.messages, request.options])
    return hashlib.sha256(encoded).hexdigest()


class CallLog:
    """Appends records to a JSONL file (one JSON object per line), flushed per record.

    ``header`` (any JSON object, e.g. the run's seed and models) is written first, with
    ``"type": "run"``. ``records`` keeps what was written in memory as well.
    """

    def __init__(self, path: str | Path | None, header: dict[str, Any] | None = None) -> None:
        self.path = None if path is None else Path(path)
        self.records: list[CallRecord] = []
        self._file: IO[bytes] | None = None
        if self.path is not None:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            self._file = self.path.open("wb")
            if header is not None:
                self._write(msgspec.json.encode({"type": "run", **header}))

    def _write(self, line: bytes) -> None:
        if self._file is not None:
            self._file.write(line + b"\n")
            self._file.flush()

    def append(self, record: CallRecord) -> None:
        self.records.append(record)
        self._write(msgspec.json.encode(record))

    def close(self) -> None:
        if self._file is not None:
            self._file.close()
            self._file = None


def read_log(path: str | Path) -> tuple[dict[str, Any], list[CallRecord]]:
    """The header and the call records of a JSONL log written by ``CallLog``.

    Raises ``ValueError`` naming the file and line for a line that is not a record.
    """
    header: dict[str, Any] = {}
    records: list[CallRecord] = []
    decoder = msgspec.json.Decoder(CallRecord)
    with Path(path).open("rb") as file:
        for number, line in enumerate(file, 1):
            if not line.strip():
                continue
            try:
                item = msgspec.json.decode(line)
                if isinstance(item, dict) and item.get("type") == "run":
                    header = item
                else:
                    records.append(decoder.decode(line))
            except (msgspec.DecodeError, msgspec.ValidationError) as error:
                raise ValueError(f"{path}:{number}: not a call record: {error}") from None
    return header, records


class RecordingLLM(LLMService):
    """``inner`` with every call appended to ``log`` under the label ``service``.

    A call is logged when its stream ends: finished, failed (``error`` set) or closed
    early (``finish_reason="cancelled"``, with the text received so far).
    """

    def __init__(self, inner: LLMService, log: CallLog, service: str) -> None:
        super().__init__(inner.model)
        self.inner = inner
        self.log = log
        self.service = service

    async def _generate(self, request: ChatRequest) -> AsyncGenerator[str | ChatResult, None]:
        began = time.perf_counter()
        parts: list[str] = []
        result = ChatResult("cancelled")
        error: str | None = None
        try:
            async with self.inner.stream(
                request.openai or request.messages, request.options
            ) as stream:
                async for chunk in stream:
                    parts.append(chunk)
                    yield chunk
            assert stream.result is not None
            result = stream.result
            yield result
        except ModelError as failure:
            result, error = ChatResult("error"), f"{type(failure).__name__}: {failure}"
            raise
        finally:
            self.log.append(
                CallRecord(
                    service=self.service,
                    model=self.inner.model,
                    key=request_key(request),
                    messages=list(request.messages),
                    options=request.options,
                    text="".join(parts),
                    finish_reason=result.finish_reason,
                    usage=result.usage,
                    latency_s=time.perf_counter() - began,
                    error=error,
                )
            )


class ReplayLLM(LLMService):
    """Answers every request with the response recorded for an identical one.

    Raises ``ValueError`` for a request the records do not hold (the code now asks
    something the logged run did not), naming its key. A recorded error is raised
    again as a ``ModelError`` with the recorded message.
    """

    def __init__(self, records: Iterable[CallRecord], model: str = "replay") -> None:
        super().__init__(model)
        self._responses: dict[str, deque[CallRecord]] = {}
        for record in records:
            self._responses.setdefault(record.key, deque()).append(record)

    async def _generate(self, request: ChatRequest) -> AsyncGenerator[str | ChatResult, None]:
        key = request_key(request)
        queue = self._responses.get(key)
        if not queue:
            raise ValueError(
                f"ReplayLLM: no recorded response for request {key[:12]} "
                f"(the run asks something the log does not hold)"
            )
        record = queue.popleft()
        if record.error is not None:
            raise ModelError(record.model, f"recorded failure: {record.error}")
        if record.text:
            yield record.text
        yield ChatResult(record.finish_reason, record.usage)
