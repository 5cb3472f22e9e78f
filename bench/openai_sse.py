"""OpenAI's Chat Completions stream, served on loopback: what a local stand-in for a model
provider needs, shared by the bench's paced model (``bench.pipecat_server``) and the tests'
scripted provider (``tests/openai_server.py``).

``LoopbackServer`` is a threaded HTTP server on ``127.0.0.1`` (a free port) serving in a
daemon thread while its ``with`` block runs, its ``api_base`` the OpenAI SDK's and
litellm's ``.../v1``. ``StreamHandler`` writes a streamed reply as a real provider does and
as the SDK and litellm read it: status 200, ``text/event-stream``, a chunked body (so a
connection dropped mid-stream is an incomplete body, not a short one), one server-sent
event per ``chat.completion.chunk``, ending with ``data: [DONE]`` and the last chunk.

It lives in bench/ because the tests already import the bench (never the other way round):
a benchmark run needs nothing from tests/.
"""

from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Self


def completion_chunk(
    model: str,
    delta: dict[str, Any],
    finish: str | None = None,
    *,
    id: str,
    created: int,
) -> dict[str, Any]:
    """One ``chat.completion.chunk`` with a single choice carrying ``delta``."""
    return {
        "id": id,
        "object": "chat.completion.chunk",
        "created": created,
        "model": model,
        "choices": [{"index": 0, "delta": delta, "finish_reason": finish}],
    }


class StreamHandler(BaseHTTPRequestHandler):
    """A request handler that answers with a server-sent event stream; subclasses write
    ``do_POST`` with ``read_body``, ``begin_stream``, ``event`` and ``end_stream``."""

    protocol_version = "HTTP/1.1"

    def log_message(self, *args: Any) -> None:
        pass

    def read_body(self) -> bytes:
        """The request's body (``content-length`` bytes; none: empty)."""
        return self.rfile.read(int(self.headers.get("content-length") or 0))

    def begin_stream(self) -> None:
        """Status 200 and the headers of a chunked event stream."""
        self.send_response(200)
        self.send_header("content-type", "text/event-stream")
        self.send_header("cache-control", "no-cache")
        self.send_header("connection", "close")
        self.send_header("transfer-encoding", "chunked")
        self.end_headers()

    def event(self, data: dict[str, Any]) -> None:
        """One server-sent event carrying ``data`` as JSON."""
        self.chunk(b"data: " + json.dumps(data).encode() + b"\n\n")

    def end_stream(self) -> None:
        """``data: [DONE]`` and the last chunk: the body is complete."""
        self.chunk(b"data: [DONE]\n\n")
        self.chunk(b"")

    def chunk(self, data: bytes) -> None:
        """One piece of a chunked body (empty: the last chunk)."""
        self.wfile.write(f"{len(data):x}\r\n".encode() + data + b"\r\n")
        self.wfile.flush()


class LoopbackServer:
    """``handler`` served on a free loopback port from a daemon thread named ``name``, while
    the ``with`` block runs."""

    def __init__(self, handler: type[BaseHTTPRequestHandler], name: str) -> None:
        self._http = ThreadingHTTPServer(("127.0.0.1", 0), handler)
        self._http.daemon_threads = True
        self._thread = threading.Thread(target=self._http.serve_forever, name=name, daemon=True)

    @property
    def api_base(self) -> str:
        return f"http://127.0.0.1:{self._http.server_address[1]}/v1"

    def __enter__(self) -> Self:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._http.shutdown()
        self._http.server_close()
        self._thread.join(timeout=10)
