"""A faithful OpenAI-compatible HTTP server on loopback, standing in for a remote provider.

It speaks the Chat Completions protocol as the OpenAI SDK expects it (``POST
.../chat/completions``, JSON errors with status codes and headers such as
``Retry-After``, streamed replies as server-sent events ending with ``data: [DONE]``)
and records every request it receives (path, headers, JSON body), whatever the path:
a test of what litellm sends to another provider family reads the recorded body even
when the reply does not fit that provider.

Each request takes the next scripted ``Reply`` (the last one repeats). A reply can
``hang`` before answering or after its first chunk until the server is closed, which is
how a test makes a provider that never answers or stalls mid-stream; with ``drop_after``
it sends that many chunks and then closes the connection in the middle of the body (a
streamed reply is chunked, as a real provider's is, so the client sees an incomplete
body, not a short one); an error ``status`` carries ``message`` as the provider's; with
``usage`` the stream ends with OpenAI's usage chunk; with ``reasoning`` it begins with a
reasoning delta; with ``tool_calls`` they follow the text.
"""

from __future__ import annotations

import json
import socket
import threading
import time
from dataclasses import dataclass, field
from typing import Any

from bench.openai_sse import LoopbackServer, StreamHandler, completion_chunk


@dataclass
class Reply:
    """One scripted response: an error ``status`` with ``headers``, or a stream of ``chunks``."""

    status: int = 200
    chunks: tuple[str, ...] = ("ok",)
    headers: dict[str, str] = field(default_factory=dict)
    hang: str | None = None
    """``"before"``: never answer; ``"after_first"``: stall after the first chunk."""
    drop_after: int | None = None
    """Close the connection after this many chunks, mid-body (None: finish the stream)."""
    message: str | None = None
    """The error reply's ``error.message`` (default ``"scripted <status>"``)."""
    usage: dict[str, Any] | None = None
    """The ``usage`` object of a last chunk without choices, sent (as OpenAI does) when the
    request asked for it (``stream_options.include_usage``); None: no usage reported."""
    reasoning: str | None = None
    """Reasoning content, streamed as a first delta of its own under ``reasoning_field``."""
    reasoning_field: str = "reasoning_content"
    tool_calls: tuple[dict[str, str], ...] = ()
    """Tool calls (``{"id", "name", "arguments"}``), streamed after the text as OpenAI
    does: one delta per call (id, name and the whole argument string), then the finish
    reason ``tool_calls``."""


@dataclass
class Request:
    path: str
    headers: dict[str, str]
    body: dict[str, Any]
    at: float
    """``time.monotonic()`` when it arrived."""


class OpenAIServer(LoopbackServer):
    """``with OpenAIServer(Reply(...), ...) as server:``, then ``server.api_base``."""

    def __init__(self, *replies: Reply) -> None:
        self.replies = list(replies) or [Reply()]
        self.requests: list[Request] = []
        self.closed = threading.Event()
        self._lock = threading.Lock()
        super().__init__(self._handler(), "openai-server")

    def __exit__(self, *exc: object) -> None:
        self.closed.set()  # releases hanging handlers
        super().__exit__(*exc)

    def _next(self, request: Request) -> Reply:
        with self._lock:
            self.requests.append(request)
            return self.replies.pop(0) if len(self.replies) > 1 else self.replies[0]

    def _handler(self) -> type[StreamHandler]:
        server = self

        class Handler(StreamHandler):
            def do_POST(self) -> None:
                raw = self.read_body()
                try:
                    body = json.loads(raw or b"{}")
                except ValueError:
                    body = {"_raw": raw.decode(errors="replace")}
                reply = server._next(Request(self.path, dict(self.headers), body, time.monotonic()))
                if reply.hang == "before":
                    server.closed.wait()
                    return
                if reply.status != 200:
                    payload = json.dumps(
                        {
                            "error": {
                                "message": reply.message or f"scripted {reply.status}",
                                "type": "scripted",
                                "code": str(reply.status),
                            }
                        }
                    ).encode()
                    self.send_response(reply.status)
                    for name, value in {
                        "content-type": "application/json",
                        **reply.headers,
                    }.items():
                        self.send_header(name, value)
                    self.send_header("content-length", str(len(payload)))
                    self.end_headers()
                    self.wfile.write(payload)
                    return
                self.begin_stream()
                model = body.get("model", "m")
                try:
                    if reply.reasoning is not None:
                        self._delta(
                            model, {"role": "assistant", reply.reasoning_field: reply.reasoning}
                        )
                    for index, text in enumerate(reply.chunks):
                        if index == reply.drop_after:
                            self.wfile.flush()
                            self.connection.shutdown(socket.SHUT_RDWR)  # no last chunk
                            self.close_connection = True
                            return
                        self._delta(model, {"role": "assistant", "content": text})
                        if index == 0 and reply.hang == "after_first":
                            server.closed.wait()
                            return
                    for index, call in enumerate(reply.tool_calls):
                        function = {"name": call["name"], "arguments": call["arguments"]}
                        tool_call = {
                            "index": index,
                            "id": call["id"],
                            "type": "function",
                            "function": function,
                        }
                        self._delta(model, {"role": "assistant", "tool_calls": [tool_call]})
                    self._delta(model, {}, "tool_calls" if reply.tool_calls else "stop")
                    include = (body.get("stream_options") or {}).get("include_usage")
                    if reply.usage is not None and include:
                        usage = completion_chunk(model, {}, id="c1", created=1)
                        self.event({**usage, "choices": [], "usage": reply.usage})
                    self.end_stream()
                except (BrokenPipeError, ConnectionResetError):
                    pass
                self.close_connection = True

            def _delta(self, model: str, delta: dict[str, Any], finish: str | None = None) -> None:
                self.event(completion_chunk(model, delta, finish, id="c1", created=1))

        return Handler
