"""The paced model both sides of the Pipecat side-by-side call: OpenAI's Chat Completions on
loopback, a fixed first token and a fixed token rate, whoever asks.

``PacedModelServer`` answers every ``POST .../chat/completions`` with the same streamed
reply (``ANSWER``, one word per chunk, server-sent events ending with ``data: [DONE]``,
as the OpenAI SDK and litellm read them): the first chunk ``first_token_s`` after the
request arrived, then one chunk every ``1 / tokens_per_s`` seconds. The reply does not
depend on the request, so xrmq and Pipecat get the same model, word for word and
millisecond for millisecond. It records, per request, when it arrived and when the chunk
that ends the first sentence was sent (``Served``): the model's share of a turn's end of
speech to first audio frame is the time between them, whichever framework asked.
"""

from __future__ import annotations

import json
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

ANSWER = (
    "The spare key is in drawer twelve of the blue cabinet in lab three. "
    "Ask me again if you cannot find it."
)
"""Two sentences: the first audio frame follows the first one."""


@dataclass
class Served:
    """One answered request (``time.time()`` stamps, comparable across processes)."""

    arrived: float
    first_sentence_sent: float = 0.0
    messages: int = 0


class PacedModelServer:
    """``with PacedModelServer() as server:``, then ``server.api_base`` and ``server.served``."""

    def __init__(self, *, first_token_s: float = 0.2, tokens_per_s: float = 40.0) -> None:
        if first_token_s < 0 or tokens_per_s <= 0:
            raise ValueError("PacedModelServer: first_token_s >= 0 and tokens_per_s > 0")
        self.first_token_s = first_token_s
        self.tokens_per_s = tokens_per_s
        self.served: list[Served] = []
        self.on_served: Callable[[Served], None] | None = None
        """Called (in the serving thread) when a reply is complete."""
        self._lock = threading.Lock()
        self._http = ThreadingHTTPServer(("127.0.0.1", 0), self._handler())
        self._http.daemon_threads = True
        self._thread = threading.Thread(
            target=self._http.serve_forever, name="paced-model", daemon=True
        )

    @property
    def api_base(self) -> str:
        return f"http://127.0.0.1:{self._http.server_address[1]}/v1"

    def __enter__(self) -> PacedModelServer:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._http.shutdown()
        self._http.server_close()
        self._thread.join(timeout=10)

    def _handler(self) -> type[BaseHTTPRequestHandler]:
        server = self
        words = ANSWER.split(" ")
        chunks = [word if index == 0 else " " + word for index, word in enumerate(words)]

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args: Any) -> None:
                pass

            def do_POST(self) -> None:
                arrived, began = time.time(), time.monotonic()
                length = int(self.headers.get("content-length") or 0)
                body = json.loads(self.rfile.read(length) or b"{}")
                record = Served(arrived, messages=len(body.get("messages") or ()))
                with server._lock:
                    server.served.append(record)
                model = body.get("model", "paced")
                self.send_response(200)
                self.send_header("content-type", "text/event-stream")
                self.send_header("cache-control", "no-cache")
                self.send_header("connection", "close")
                self.send_header("transfer-encoding", "chunked")
                self.end_headers()
                try:
                    for index, text in enumerate(chunks):
                        due = began + server.first_token_s + index / server.tokens_per_s
                        time.sleep(max(0.0, due - time.monotonic()))
                        self._event(model, {"role": "assistant", "content": text}, None)
                        if not record.first_sentence_sent and text.endswith("."):
                            record.first_sentence_sent = time.time()
                    self._event(model, {}, "stop")
                    self._chunk(b"data: [DONE]\n\n")
                    self._chunk(b"")
                except (BrokenPipeError, ConnectionResetError):
                    pass
                if server.on_served is not None:
                    server.on_served(record)
                self.close_connection = True

            def _event(self, model: str, delta: dict[str, str], finish: str | None) -> None:
                data = {
                    "id": "paced",
                    "object": "chat.completion.chunk",
                    "created": int(time.time()),
                    "model": model,
                    "choices": [{"index": 0, "delta": delta, "finish_reason": finish}],
                }
                self._chunk(b"data: " + json.dumps(data).encode() + b"\n\n")

            def _chunk(self, data: bytes) -> None:
                self.wfile.write(f"{len(data):x}\r\n".encode() + data + b"\r\n")
                self.wfile.flush()

        return Handler


class PacedModelProcess:
    """The server in a process of its own, so neither side's work in the bench process
    (Pipecat's pipelines run there) delays its pacing: ``with PacedModelProcess() as
    model:``, then ``model.api_base`` and ``model.served`` (filled as requests are answered;
    the child prints one JSON line per answered request and stops at the end of its stdin)."""

    def __init__(self, *, first_token_s: float = 0.2, tokens_per_s: float = 40.0) -> None:
        self.args = [str(first_token_s), str(tokens_per_s)]
        self.served: list[Served] = []
        self.api_base = ""
        self._process: subprocess.Popen[str] | None = None
        self._reader: threading.Thread | None = None

    def __enter__(self) -> PacedModelProcess:
        self._process = subprocess.Popen(
            [sys.executable, "-m", "bench.pipecat_server", *self.args],
            cwd=Path(__file__).resolve().parent.parent,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )
        assert self._process.stdout is not None
        self.api_base = self._process.stdout.readline().strip()
        if not self.api_base.startswith("http://127.0.0.1:"):
            self._process.kill()
            raise RuntimeError(f"paced model server did not start: {self.api_base!r}")
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()
        return self

    def _read(self) -> None:
        assert self._process is not None and self._process.stdout is not None
        for line in self._process.stdout:
            self.served.append(Served(**json.loads(line)))

    def __exit__(self, *exc: object) -> None:
        assert self._process is not None and self._process.stdin is not None
        self._process.stdin.close()
        try:
            self._process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self._process.kill()
            self._process.wait()
        if self._reader is not None:
            self._reader.join(timeout=10)


def main(argv: list[str]) -> None:
    first_token_s, tokens_per_s = (float(value) for value in argv[:2])
    lock = threading.Lock()

    def report(record: Served) -> None:
        with lock:  # serving threads finish at once under several speakers
            sys.stdout.write(json.dumps(asdict(record)) + "\n")
            sys.stdout.flush()

    with PacedModelServer(first_token_s=first_token_s, tokens_per_s=tokens_per_s) as server:
        server.on_served = report
        print(server.api_base, flush=True)
        sys.stdin.read()  # until the parent closes it


if __name__ == "__main__":
    main(sys.argv[1:])
