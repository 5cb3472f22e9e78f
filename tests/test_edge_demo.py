"""``xrmq demo``: the scripted session runs from the installed command, and fails loudly."""

from __future__ import annotations

import asyncio
import os
import re
import signal
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from xrmq.actors.edge.config_loader import load_config
from xrmq.actors.edge.configfile import write_config
from xrmq.actors.edge.demo import (
    FOLLOW_UP_FACT,
    SENSOR_FACT,
    TOOL_FACT,
    Ask,
    DemoFailure,
    Session,
    demo_config,
)
from xrmq.actors.edge.private_stack import PrivateStack

from buses import processes_mentioning
from system_packages import path_without

pytestmark = pytest.mark.timeout(60)

EXAMPLES = Path(__file__).parent.parent / "examples"


def xrmq_command() -> list[str]:
    """The installed ``xrmq`` script next to this interpreter (else the module it runs)."""
    script = Path(sys.executable).parent / "xrmq"
    return [str(script)] if script.exists() else [sys.executable, "-m", "xrmq.actors.cli"]


def test_demo_runs_the_session_and_exits_0_leaving_nothing_behind(tmp_path):
    env = {**os.environ, "TMPDIR": str(tmp_path), "XRMQ_RUNTIME_DIR": str(tmp_path)}
    result = subprocess.run(
        [*xrmq_command(), "demo"], capture_output=True, text=True, cwd=tmp_path, env=env, timeout=50
    )
    output = result.stdout
    assert result.returncode == 0, output + result.stderr[-3000:]
    lines = output.splitlines()
    sensor_answer = next(
        line for line in lines if "85 degrees" in line and "conversation +" in line
    )
    assert SENSOR_FACT in sensor_answer and sensor_answer.lstrip().startswith("[alice]")
    asked = lines.index("  [alice] > Where did I leave the spare key?")
    assert FOLLOW_UP_FACT in lines[asked + 1] and "conversation +" in lines[asked + 1]
    killed = lines.index("  kill -9 context")  # mid-session, before follow-ups that need context
    assert killed < lines.index("  [bob] > What is my badge number?") < asked
    assert "4471" in lines[lines.index("  [bob] > What is my badge number?") + 1]
    restarted = "  context restarted by the supervisor and ready again after "
    assert lines[killed + 1].startswith(restarted)
    summary = "  context process: killed mid-session (SIGKILL), ready again after "
    assert any(
        line.startswith(summary) and line.endswith("the session continued with its context")
        for line in lines
    )
    assert any(line.endswith("<interrupted>") for line in lines)
    assert "  [bob] context cleared (the context process holds no actor of theirs)" in lines
    forgotten = lines.index("  [bob] > What is my badge number?", lines.index("  [bob] leaves"))
    assert "4471" not in lines[forgotten + 1]
    tool_turn = lines.index("  [alice] > What is on the bench right now?")
    # the camera's tool result
    assert TOOL_FACT in lines[tool_turn + 1] and "lab-tools +" in lines[tool_turn + 1]
    assert "  gaps: 0 (over 8 runtimes)" in lines  # the camera process is the eighth
    assert any(line.startswith("  turns: 11 (2 participants: alice, bob)") for line in lines)
    assert any(line.startswith("  first-chunk latency: p50 ") for line in lines)
    compactions = next(line for line in lines if line.startswith("  compactions run: "))
    assert int(compactions.split()[2]) >= 1
    assert lines[-1] == "xrmq demo: ok"
    assert processes_mentioning(str(tmp_path)) == []
    assert list(tmp_path.iterdir()) == []  # the stack's directory, sockets and config are gone


def test_the_demo_config_and_the_reference_config_survive_the_trip_to_a_file(tmp_path):
    config = demo_config()
    assert write_config(config, tmp_path / "demo.toml") == load_config(tmp_path / "demo.toml")
    reference = load_config(EXAMPLES / "edge-box.toml")
    written = write_config(reference, tmp_path / "again.toml")
    assert written.processes == reference.processes and written.context == reference.context


async def test_a_missing_fact_fails_the_session_with_the_question_and_the_answer(
    tmp_path, monkeypatch
):
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))  # where the stack makes its directory
    script = (Ask("carol", "What is the door code?", expect="4-7-1-1"),)
    async with PrivateStack(demo_config()) as stack:
        assert stack.directory.parent == tmp_path and stack.bus == f"ipc://{stack.directory}/bus"
        with pytest.raises(DemoFailure) as failure:
            await Session(stack.config, stack.bus, open(os.devnull, "w"), script=script).run()
    assert str(failure.value) == (
        "carol's 'What is the door code?': expected '4-7-1-1' in the answer, "
        "got 'I have nothing about that in what I was given.'"
    )
    assert list(tmp_path.iterdir()) == []


async def test_a_process_that_dies_stops_the_demo_stack_and_says_which(tmp_path, monkeypatch):
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    async with PrivateStack(demo_config()) as stack:
        pids = dict(re.findall(r"(\S+)=(\d+)", stack.ready_line))
        os.kill(int(pids["conversation"]), signal.SIGKILL)
        # the demo's config allows no restart
        reason = await asyncio.wait_for(stack.wait_failed(), 30)
        assert stack.failed
    assert reason.startswith("the edge stack stopped:\n")
    assert (
        "xrmq up: gave up on conversation: 1 crash within 60s (limit 1); last killed by SIGKILL"
        in reason
    )
    assert list(tmp_path.iterdir()) == []


def test_demo_voice_without_the_voice_extra_names_the_extra_and_exits_2(tmp_path):
    hidden = tmp_path / "no-numpy"
    hidden.mkdir()
    # None in sys.modules is how Python marks a module absent: `import numpy` raises
    # ModuleNotFoundError, as on a machine without the voice extra.
    (hidden / "sitecustomize.py").write_text("import sys\n\nsys.modules['numpy'] = None\n")
    env = {**os.environ, "PYTHONPATH": str(hidden), "XRMQ_RUNTIME_DIR": str(tmp_path)}
    result = subprocess.run(
        [*xrmq_command(), "demo", "--voice"],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        env=env,
        timeout=50,
    )
    assert result.returncode == 2, result.stdout + result.stderr
    assert "Traceback" not in result.stdout + result.stderr
    assert "--voice needs the voice extra (numpy" in result.stderr  # and what needs numpy
    assert "pip install 'xrmq[voice]'" in result.stderr
    assert "starting the edge stack" not in result.stdout


def test_demo_voice_without_espeak_ng_says_so_before_starting_and_exits_2(tmp_path):
    env = {
        **os.environ,
        "PATH": path_without(tmp_path / "bin", "espeak-ng"),
        "XRMQ_RUNTIME_DIR": str(tmp_path),
    }
    result = subprocess.run(
        [*xrmq_command(), "demo", "--voice"],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        env=env,
        timeout=50,
    )
    assert result.returncode == 2, result.stdout + result.stderr
    assert "Traceback" not in result.stdout + result.stderr
    assert "espeak-ng (speaks the questions): apt-get install espeak-ng" in result.stderr
    assert "starting the edge stack" not in result.stdout
