"""``xrmq up examples/edge-box.toml`` with ``xrmq say``: answers, a kill -9 survived, a clean
stop."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from buses import broker_process, expect_line, reap

pytestmark = pytest.mark.timeout(60)

CONFIG = Path(__file__).parent.parent / "examples" / "edge-box.toml"
CLI = [sys.executable, "-m", "xrmq.actors.cli"]


def say(env: dict, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([*CLI, "say", *args], capture_output=True, text=True, env=env, timeout=30)


def test_up_answers_say_survives_kill_9_of_the_conversation_and_stops_cleanly(tmp_path):
    runtime_dir = tmp_path / "run"
    runtime_dir.mkdir(mode=0o700)
    env = {**os.environ, "XRMQ_RUNTIME_DIR": str(runtime_dir), "XRMQ_LOG_LEVEL": "WARNING"}
    up = subprocess.Popen(
        [*CLI, "up", str(CONFIG)],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        env=env,
    )
    try:
        ready = expect_line(up, "xrmq up: ready")
        pids = dict(re.findall(r"(\S+)=(\d+)", ready))
        first = say(
            env, "--participant", "p1", "--timeout", "20", "I keep the spare key in drawer 12."
        )
        assert first.returncode == 0, first.stderr
        # the whole reply, e.g. "I have nothing about that in what I was given."
        assert first.stdout.strip()

        os.kill(int(pids["conversation"]), signal.SIGKILL)
        assert expect_line(up, "xrmq up: conversation exited").startswith(
            "xrmq up: conversation exited (killed by SIGKILL); 1 crash within 60s, restarting in "
            "0.5s"
        )
        restarted = int(expect_line(up, "xrmq up: restarted conversation").rpartition("pid=")[2])
        assert restarted != int(pids["conversation"])

        second = say(env, "--participant", "p2", "--timeout", "20", "Where is the spare key?")
        assert second.returncode == 0, second.stderr
        # p1's context is not p2's
        assert second.stdout.strip() == "I have nothing about that in what I was given."

        up.send_signal(signal.SIGTERM)
        rest = up.stdout.read().splitlines()
        assert up.wait(timeout=30) == 0
    finally:
        reap(up)
    assert rest[-1] == "xrmq up: stopped"
    # no orphans: the broker and every incarnation are gone
    for pid in (up.pid, restarted, *map(int, pids.values())):
        assert not Path(f"/proc/{pid}").exists()
    assert list(runtime_dir.iterdir()) == []  # no stale ipc socket or lock files


def test_say_without_an_answer_exits_non_zero_naming_the_timeout():
    with broker_process() as bus:  # a bus with no router on it
        result = say(
            {**os.environ, "XRMQ_LOG_LEVEL": "WARNING"},
            "--bus",
            bus,
            "--timeout",
            "0.5",
            "Anyone there?",
        )
    assert result.returncode == 2
    assert (
        result.stderr.strip()
        == "xrmq say: no complete answer to p1's 'Anyone there?' within 0.5s (no reply at all)"
    )
    assert result.stdout == ""
