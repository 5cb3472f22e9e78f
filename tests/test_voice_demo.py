"""``xrmq demo --voice``: progress from the start, each answer printed and checked for its fact."""

from __future__ import annotations

import io
import os
import subprocess
import sys
from pathlib import Path

import pytest

from xrmq.actors.edge import voice_demo
from xrmq.actors.edge.voice_demo import SPOKEN, Spoken, answer_problem

import voice_support  # noqa: F401  (skips without the voice extra or espeak-ng)

pytestmark = pytest.mark.timeout(240)

FACTS = tuple(spoken.fact for spoken in SPOKEN)


def xrmq_command() -> list[str]:
    script = Path(sys.executable).parent / "xrmq"
    return [str(script)] if script.exists() else [sys.executable, "-m", "xrmq.actors.cli"]


def test_an_answer_with_its_fact_and_no_other_answers_the_question():
    answer = "The kettle in lab 3 is set to 85 degrees."
    assert answer_problem(answer, "85 degrees", FACTS) is None


def test_an_answer_without_its_fact_is_named_with_the_missing_fact():
    problem = answer_problem("The fire drill starts at 14:30 at gate B.", "85 degrees", FACTS)
    assert problem == "the answer does not hold '85 degrees'"


def test_an_answer_reciting_every_fact_does_not_answer_the_question():
    recital = " ".join(voice_demo.CONTEXT_NOTES)
    problem = answer_problem(recital, "drawer 12", FACTS)
    assert problem is not None and "'85 degrees'" in problem and "'14:30'" in problem


def test_an_empty_answer_does_not_answer_the_question():
    assert answer_problem("  ", "drawer 12", FACTS) == "the answer was empty"


def test_the_voice_demo_prints_progress_first_and_each_answer_with_its_fact(tmp_path):
    env = {**os.environ, "XRMQ_RUNTIME_DIR": str(tmp_path)}
    result = subprocess.run(
        [*xrmq_command(), "demo", "--voice"],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        env=env,
        timeout=220,
    )
    out = result.stdout
    assert result.returncode == 0, out + result.stderr
    lines = out.splitlines()
    assert lines[0].startswith("xrmq demo --voice: checking the bundled Whisper weights")
    ready = [index for index, line in enumerate(lines) if line.startswith("  voice ready (")]
    said = [index for index, line in enumerate(lines) if line.startswith("[alice] says:")]
    assert ready and said and ready[0] < said[0], out
    prefix = "[assistant] answer: "
    answers = [line.removeprefix(prefix) for line in lines if line.startswith(prefix)]
    assert len(answers) == len(SPOKEN), out
    for spoken, answer in zip(SPOKEN, answers, strict=True):
        assert spoken.fact in answer, out
        assert not [fact for fact in FACTS if fact != spoken.fact and fact in answer], out
    assert lines[-1] == "xrmq demo --voice: ok"


async def test_the_voice_demo_fails_with_a_clear_line_when_an_answer_lacks_its_fact(
    monkeypatch,
):
    monkeypatch.setattr(voice_demo, "SPOKEN", (Spoken("When does the fire drill start?", "15:45"),))
    out = io.StringIO()
    assert await voice_demo.run_voice_demo(out) == 1
    text = out.getvalue()
    assert "[assistant] answer: The fire drill starts at 14:30 at gate B." in text
    assert (
        "xrmq demo --voice: FAILED: 'When does the fire drill start?': "
        "the answer does not hold '15:45'"
    ) in text
    assert "xrmq demo --voice: ok" not in text
