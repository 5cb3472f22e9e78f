"""Issue 13, the fuzz line: every adversarial category at a running ``xrmq up`` stack.

A raw pyzmq process (``bench/fuzz_frames.py``, no xrmq import) sends every category of
bad frame at the default edge box's topics. Afterwards: no process died or restarted,
no actor's mailbox task ended, every category is counted where it was rejected (the
runtimes' ``rejected_by``; an oversize frame at the broker, which drops the sender's
connection), and a turn with context is answered end to end (sensor note -> context
section -> conversation -> voice output) and played by the renderer.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from buses import expect_line, reap

pytestmark = pytest.mark.timeout(180)

ROOT = Path(__file__).parent.parent
CONFIG = ROOT / "examples" / "edge-box.toml"
CLI = [sys.executable, "-m", "xrmq.actors.cli"]
PROCESSES = ("context", "compaction", "conversation", "router", "renderer")


def cli(env: dict, *args: str, timeout: float = 60) -> subprocess.CompletedProcess:
    return subprocess.run([*CLI, *args], capture_output=True, text=True, env=env, timeout=timeout)


def top(env: dict) -> dict[str, dict]:
    result = cli(
        env, "top", "--once", "--json", "--expect", str(len(PROCESSES) + 2), "--window", "30"
    )  # the processes, the broker and xrmq up's own runtime
    assert result.returncode == 0, result.stderr
    return {row["runtime"]: row for row in json.loads(result.stdout)}


def test_every_fuzz_category_is_counted_and_every_actor_still_answers(tmp_path):
    runtime_dir = tmp_path / "run"
    runtime_dir.mkdir(mode=0o700)
    env = {**os.environ, "XRMQ_RUNTIME_DIR": str(runtime_dir), "XRMQ_LOG_LEVEL": "ERROR"}
    up = subprocess.Popen(
        [*CLI, "up", str(CONFIG)],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        env=env,
    )
    try:
        ready = expect_line(up, "xrmq up: ready")
        pids = {name: int(pid) for name, pid in re.findall(r"(\S+)=(\d+)", ready)}
        before = top(env)

        fuzz = subprocess.run(
            [
                sys.executable,
                "-m",
                "bench.fuzz_frames",
                "--bus",
                f"ipc://{runtime_dir}/default",
                "--count",
                "1100",
            ],
            capture_output=True,
            text=True,
            cwd=ROOT,
            timeout=120,
        )
        assert fuzz.returncode == 0, fuzz.stderr
        sent = json.loads(fuzz.stdout.removeprefix("fuzz: sent "))
        assert all(count > 0 for count in sent.values()), sent

        note = cli(
            env,
            "publish",
            "notes",
            "--participant",
            "fz-check",
            "The kettle in lab 3 is set to 85 degrees.",
        )
        assert note.returncode == 0, note.stderr
        answer = cli(
            env,
            "say",
            "--participant",
            "fz-check",
            "--timeout",
            "30",
            "What is the kettle in lab 3 set to?",
        )
        assert answer.returncode == 0, answer.stderr
        assert "85" in answer.stdout
        after = top(env)

        for name, pid in pids.items():  # nobody died, nobody was restarted
            assert Path(f"/proc/{pid}").exists(), f"{name} died"
        for name in PROCESSES:
            row = after[name]
            assert row["pid"] == pids[name] and row["restarts"] == 0
            assert row["actor_restarts"] == 0, (name, row)
            assert row["faults"] == 0, (name, row["actor_faults"])
        rejected: dict[str, int] = {}
        for name in PROCESSES:
            for category, count in after[name]["rejected_by"].items():
                rejected[category] = (
                    rejected.get(category, 0) + count - before[name]["rejected_by"].get(category, 0)
                )
        for category in (
            "frames",
            "metadata",
            "payload",
            "participant",
            "reply_to",
            "seq",
            "epoch",
        ):
            assert rejected.get(category, 0) > 0, (category, rejected)
        dropped = after["broker"]["gauges"]["broker.publishers_dropped"]
        assert dropped - before["broker"]["gauges"]["broker.publishers_dropped"] >= sent["oversize"]
        renderer = after["renderer"]
        # It took the answer's fragments.
        assert renderer["delivered"] > before["renderer"]["delivered"]
        assert renderer["gauges"]["voice.participants"] >= 1
    finally:
        up.terminate()
        try:
            up.wait(timeout=30)
        finally:
            reap(up)
    output = up.stdout.read()
    assert "exited" not in output, output
