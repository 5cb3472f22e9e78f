"""The Pipecat side-by-side's pieces that must be right for its figures to mean anything:
the paced model server speaks OpenAI's streaming protocol, paces no faster than it says,
and stamps each request; the suite names the package it is missing."""

from __future__ import annotations

import importlib.util
import json
import sys
import time
import urllib.request
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
from bench import pipecat_bench  # noqa: E402  (bench/ is not installed: the repository's)
from bench.pipecat_server import ANSWER, PacedModelProcess, PacedModelServer  # noqa: E402
from bench.suite import SuiteContext  # noqa: E402


def _stream(api_base: str) -> tuple[list[str], bool]:
    """POST a streamed chat completion; (the content deltas, whether [DONE] ended it)."""
    body = json.dumps(
        {"model": "paced", "stream": True, "messages": [{"role": "user", "content": "hi"}]}
    ).encode()
    request = urllib.request.Request(
        f"{api_base}/chat/completions",
        data=body,
        headers={"content-type": "application/json", "authorization": "Bearer paced"},
    )
    deltas, done = [], False
    with urllib.request.urlopen(request, timeout=10) as response:
        assert response.headers["content-type"] == "text/event-stream"
        for raw in response:
            line = raw.decode().strip()
            if not line.startswith("data: "):
                continue
            if line == "data: [DONE]":
                done = True
                continue
            choice = json.loads(line.removeprefix("data: "))["choices"][0]
            deltas.append(choice["delta"].get("content", ""))
    return deltas, done


def test_the_paced_server_streams_the_answer_word_by_word_no_sooner_than_its_pace() -> None:
    with PacedModelServer(first_token_s=0.05, tokens_per_s=200.0) as server:
        began = time.time()
        deltas, done = _stream(server.api_base)

    assert "".join(deltas) == ANSWER and done
    assert len([delta for delta in deltas if delta]) == len(ANSWER.split(" "))
    (served,) = server.served
    assert served.messages == 1 and began <= served.arrived
    first_sentence_words = len(ANSWER.split(". ")[0].split(" "))
    # The sentence's last word is due first_token_s + (words - 1) / rate after arrival.
    assert served.first_sentence_sent - served.arrived >= 0.05 + (first_sentence_words - 1) / 200


def test_the_paced_server_in_its_own_process_reports_each_answered_request() -> None:
    with PacedModelProcess(first_token_s=0.0, tokens_per_s=1000.0) as model:
        for _ in range(2):
            deltas, done = _stream(model.api_base)
            assert "".join(deltas) == ANSWER and done
    assert len(model.served) == 2
    assert all(record.first_sentence_sent >= record.arrived > 0 for record in model.served)


def test_the_suite_names_pipecat_ai_when_it_is_not_installed(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    real = importlib.util.find_spec
    monkeypatch.setattr(
        importlib.util,
        "find_spec",
        lambda name, *args: None if name == "pipecat" else real(name, *args),
    )
    with pytest.raises(RuntimeError, match="pipecat-ai is not installed"):
        pipecat_bench.run(SuiteContext(quick=True, repetitions=1, out_dir=tmp_path))
