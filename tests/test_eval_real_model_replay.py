"""The committed real-model eval run, rescored by replay (issue 32).

``tests/fixtures/eval-qwen15/`` holds one run of ``python -m bench eval`` at the issue's
small size (1 participant, 70 exchanges, 2 facts per kind, seed 7) with Qwen2.5-Coder-1.5B
(Q4_K_M, llama.cpp on loopback) for compaction and answers: its call log and the results
it printed. Replaying the log runs today's eval, context engine and summary guards against
the model's logged answers, so CI reproduces the real model's figures with no model. A
change to what the engine sends (prompts, batching, guards) makes a request the log does
not hold: re-record the fixture then (the command is in bench/README.md, "Compaction eval").
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import pytest

from xrmq.actors.eval import eval_cli as cli

pytestmark = pytest.mark.timeout(120)

FIXTURE = Path(__file__).parent / "fixtures" / "eval-qwen15"


def test_the_replay_of_the_committed_real_model_run_reproduces_its_scores(tmp_path: Path) -> None:
    parser = argparse.ArgumentParser()
    cli.add_arguments(parser)
    args = parser.parse_args(["--replay", str(FIXTURE / "calls.jsonl"), "--out", str(tmp_path)])
    assert cli.run(args) == 0
    recorded = json.loads((FIXTURE / "results.json").read_text())
    replayed = json.loads((tmp_path / "results.json").read_text())
    assert recorded["models"]["compaction"]["model"] == "openai/qwen15"
    assert recorded["config"]["exchanges"] == 70 and recorded["seed"] == 7
    assert replayed["figures"] == recorded["figures"]
    assert replayed["runs"] == recorded["runs"]
    assert replayed["latency"] == recorded["latency"]


def test_the_logged_summaries_answered_by_another_model_keep_their_context_scores(
    tmp_path: Path,
) -> None:
    parser = argparse.ArgumentParser()
    cli.add_arguments(parser)
    log = str(FIXTURE / "calls.jsonl")
    args = parser.parse_args(["--replay", log, "--answers-from", "offline", "--out", str(tmp_path)])
    assert cli.run(args) == 0
    recorded = json.loads((FIXTURE / "results.json").read_text())
    replayed = json.loads((tmp_path / "results.json").read_text())
    assert replayed["models"]["answers"]["model"] == "offline"
    assert replayed["models"]["compaction"] == recorded["models"]["compaction"]
    assert set(replayed["latency"]) == set(recorded["latency"]) - {"answer"}
    (run,) = replayed["runs"]
    (logged,) = recorded["runs"]
    assert [p["context_score"] for p in run["probes"]] == [
        p["context_score"] for p in logged["probes"]
    ]
    # The offline model answers from the same context: where its answers differ from the
    # logged model's, the answering made the difference, not compaction.
    assert [p["answer"] for p in run["probes"]] != [p["answer"] for p in logged["probes"]]


def test_answers_from_another_model_needs_a_replay(tmp_path: Path) -> None:
    parser = argparse.ArgumentParser()
    cli.add_arguments(parser)
    args = parser.parse_args(["--answers-from", "offline", "--out", str(tmp_path)])
    with pytest.raises(ValueError, match="--answers-from: goes with --replay"):
        cli.run(args)


def test_the_real_model_run_accepted_no_frozen_or_lossy_summary() -> None:
    recorded = json.loads((FIXTURE / "results.json").read_text())
    for figure in recorded["figures"]:
        for section in figure["sections"]:
            guards = section["guards"]
            assert guards["frozen_accepted"] == guards["lossy_accepted"] == 0, section
