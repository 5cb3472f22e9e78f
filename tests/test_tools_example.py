"""``xrmq up examples/tools.toml`` with ``xrmq say``: a camera process serves describe_view,
the tools destination calls it, and the answer comes from the tool result; the
conversation then answers from the shared context."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from buses import expect_line, reap

sys.path.insert(0, str(Path(__file__).parent.parent / "examples"))
from tools.camera import SCENES  # noqa: E402
from tools.inventory import Item, lookup  # noqa: E402

CONFIG = Path(__file__).parent.parent / "examples" / "tools.toml"
CLI = [sys.executable, "-m", "xrmq.actors.cli"]


def say(env: dict, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([*CLI, "say", *args], capture_output=True, text=True, env=env, timeout=60)


def test_the_inventory_finds_items_named_in_a_sentence() -> None:
    assert lookup(Item("How many multimeters are in stock?")) == {"multimeter": {"in_stock": 3, "where": "shelf A2"}}
    assert "error" in lookup(Item("Any unicorns?"))


@pytest.mark.timeout(120)
def test_up_tools_answers_what_is_on_the_bench_from_the_camera_tool(tmp_path: Path) -> None:
    runtime_dir = tmp_path / "run"
    runtime_dir.mkdir(mode=0o700)
    env = {**os.environ, "XRMQ_RUNTIME_DIR": str(runtime_dir), "XRMQ_LOG_LEVEL": "WARNING"}
    up = subprocess.Popen([*CLI, "up", str(CONFIG)], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                          env=env)
    try:
        expect_line(up, "xrmq up: ready")
        bench = say(env, "--timeout", "50", "What is on the bench?")
        assert bench.returncode == 0, bench.stderr
        assert "red multimeter" in bench.stdout  # in every scene, and only in the camera's result
        stock = say(env, "--timeout", "50", "How many multimeters are in stock?")
        assert stock.returncode == 0, stock.stderr
        assert "in_stock: 3" in stock.stdout
        up.send_signal(signal.SIGTERM)
        assert up.wait(timeout=30) == 0
    finally:
        reap(up)
    assert all("a red multimeter" in scene["bench"] for scene in SCENES)
