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
from pathlib import Path

from bench.openai_sse import LoopbackServer, StreamHandler, completion_chunk

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


class PacedModelServer(LoopbackServer):
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
        super().__init__(self._handler(), "paced-model")

    def _handler(self) -> type[StreamHandler]:
        server = self
        words = ANSWER.split(" ")
        chunks = [word if index == 0 else " " + word for index, word in enumerate(words)]

        class Handler(StreamHandler):
            def do_POST(self) -> None:
                arrived, began = time.time(), time.monotonic()
                body = json.loads(self.read_body() or b"{}")
                record = Served(arrived, messages=len(body.get("messages") or ()))
                with server._lock:
                    server.served.append(record)
                model = body.get("model", "paced")
                self.begin_stream()
                try:
                    for index, text in enumerate(chunks):
                        due = began + server.first_token_s + index / server.tokens_per_s
                        time.sleep(max(0.0, due - time.monotonic()))
                        self._event(model, {"role": "assistant", "content": text}, None)
                        if not record.first_sentence_sent and text.endswith("."):
                            record.first_sentence_sent = time.time()
                    self._event(model, {}, "stop")
                    self.end_stream()
                except (BrokenPipeError, ConnectionResetError):
                    pass
                if server.on_served is not None:
                    server.on_served(record)
                self.close_connection = True

            def _event(self, model: str, delta: dict[str, str], finish: str | None) -> None:
                self.event(
                    completion_chunk(model, delta, finish, id="paced", created=int(time.time()))
                )

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
