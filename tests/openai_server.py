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
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


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


class OpenAIServer:
    """``with OpenAIServer(Reply(...), ...) as server:``, then ``server.api_base``."""

    def __init__(self, *replies: Reply) -> None:
        self.replies = list(replies) or [Reply()]
        self.requests: list[Request] = []
        self.closed = threading.Event()
        self._lock = threading.Lock()
        self._http = ThreadingHTTPServer(("127.0.0.1", 0), self._handler())
        self._http.daemon_threads = True
        self._thread = threading.Thread(
            target=self._http.serve_forever, name="openai-server", daemon=True
        )

    @property
    def api_base(self) -> str:
        return f"http://127.0.0.1:{self._http.server_address[1]}/v1"

    def __enter__(self) -> OpenAIServer:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.closed.set()  # releases hanging handlers
        self._http.shutdown()
        self._http.server_close()
        self._thread.join(timeout=10)

    def _next(self, request: Request) -> Reply:
        with self._lock:
            self.requests.append(request)
            return self.replies.pop(0) if len(self.replies) > 1 else self.replies[0]

    def _handler(self) -> type[BaseHTTPRequestHandler]:
        server = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args: Any) -> None:
                pass

            def do_POST(self) -> None:
                length = int(self.headers.get("content-length") or 0)
                raw = self.rfile.read(length)
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
                self.send_response(200)
                self.send_header("content-type", "text/event-stream")
                self.send_header("cache-control", "no-cache")
                self.send_header("connection", "close")
                self.send_header("transfer-encoding", "chunked")
                self.end_headers()
                model = body.get("model", "m")
                try:
                    if reply.reasoning is not None:
                        self._event(
                            {
                                "id": "c1",
                                "object": "chat.completion.chunk",
                                "created": 1,
                                "model": model,
                                "choices": [
                                    {
                                        "index": 0,
                                        "delta": {
                                            "role": "assistant",
                                            reply.reasoning_field: reply.reasoning,
                                        },
                                        "finish_reason": None,
                                    }
                                ],
                            }
                        )
                    for index, text in enumerate(reply.chunks):
                        if index == reply.drop_after:
                            self.wfile.flush()
                            self.connection.shutdown(socket.SHUT_RDWR)  # no last chunk
                            self.close_connection = True
                            return
                        self._event(
                            {
                                "id": "c1",
                                "object": "chat.completion.chunk",
                                "created": 1,
                                "model": model,
                                "choices": [
                                    {
                                        "index": 0,
                                        "delta": {"role": "assistant", "content": text},
                                        "finish_reason": None,
                                    }
                                ],
                            }
                        )
                        if index == 0 and reply.hang == "after_first":
                            server.closed.wait()
                            return
                    for index, call in enumerate(reply.tool_calls):
                        self._event(
                            {
                                "id": "c1",
                                "object": "chat.completion.chunk",
                                "created": 1,
                                "model": model,
                                "choices": [
                                    {
                                        "index": 0,
                                        "delta": {
                                            "role": "assistant",
                                            "tool_calls": [
                                                {
                                                    "index": index,
                                                    "id": call["id"],
                                                    "type": "function",
                                                    "function": {
                                                        "name": call["name"],
                                                        "arguments": call["arguments"],
                                                    },
                                                }
                                            ],
                                        },
                                        "finish_reason": None,
                                    }
                                ],
                            }
                        )
                    finish = "tool_calls" if reply.tool_calls else "stop"
                    self._event(
                        {
                            "id": "c1",
                            "object": "chat.completion.chunk",
                            "created": 1,
                            "model": model,
                            "choices": [{"index": 0, "delta": {}, "finish_reason": finish}],
                        }
                    )
                    include = (body.get("stream_options") or {}).get("include_usage")
                    if reply.usage is not None and include:
                        self._event(
                            {
                                "id": "c1",
                                "object": "chat.completion.chunk",
                                "created": 1,
                                "model": model,
                                "choices": [],
                                "usage": reply.usage,
                            }
                        )
                    self._chunk(b"data: [DONE]\n\n")
                    self._chunk(b"")  # the last chunk: the body is complete
                except (BrokenPipeError, ConnectionResetError):
                    pass
                self.close_connection = True

            def _event(self, data: dict[str, Any]) -> None:
                self._chunk(b"data: " + json.dumps(data).encode() + b"\n\n")

            def _chunk(self, data: bytes) -> None:
                """One piece of a chunked body (empty: the last chunk)."""
                self.wfile.write(f"{len(data):x}\r\n".encode() + data + b"\r\n")
                self.wfile.flush()

        return Handler
