"""``xrmq up examples/tools.toml`` with ``xrmq say``: a camera process serves describe_view,
the tools destination calls it, and the answer comes from the tool result; the
conversation then answers from the shared context."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from buses import expect_line, reap
from edge_box import UpProcess

sys.path.insert(0, str(Path(__file__).parent.parent / "examples"))
from tools.camera import SCENES  # type: ignore[import-not-found]  # examples/, on sys.path
from tools.inventory import Item, lookup  # type: ignore[import-not-found]

CONFIG = Path(__file__).parent.parent / "examples" / "tools.toml"
CLI = [sys.executable, "-m", "xrmq.actors.cli"]


def say(env: dict, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([*CLI, "say", *args], capture_output=True, text=True, env=env, timeout=60)


def test_the_inventory_finds_items_named_in_a_sentence() -> None:
    assert lookup(Item("How many multimeters are in stock?")) == {
        "multimeter": {"in_stock": 3, "where": "shelf A2"}
    }
    assert "error" in lookup(Item("Any unicorns?"))


@pytest.mark.timeout(120)
async def test_up_tools_answers_from_the_camera_and_inventory_tools_and_compacts_by_hand(
    tmp_path: Path,
) -> None:
    """The box's output is read on a thread (``UpProcess``: its pipe never fills and blocks
    the supervisor) and every failure below carries its last lines: the stack's warnings
    (a tool server not discovered, a destination taken as dead) say why a turn went wrong."""
    runtime_dir = tmp_path / "run"
    runtime_dir.mkdir(mode=0o700)
    env = {**os.environ, "XRMQ_RUNTIME_DIR": str(runtime_dir), "XRMQ_LOG_LEVEL": "WARNING"}
    up = UpProcess(CONFIG, env={"XRMQ_RUNTIME_DIR": str(runtime_dir)})
    try:
        await up.line("xrmq up: ready", timeout=110)  # the test's own timeout governs
        bench = await asyncio.to_thread(say, env, "--timeout", "50", "What is on the bench?")
        assert bench.returncode == 0, f"{bench.stderr}\n{up.tail()}"
        # in every scene, and only in the camera's result
        assert "red multimeter" in bench.stdout, up.tail()
        stock = await asyncio.to_thread(
            say, env, "--timeout", "50", "How many multimeters are in stock?"
        )
        assert stock.returncode == 0, f"{stock.stderr}\n{up.tail()}"
        assert "in_stock: 3" in stock.stdout, up.tail()
        # Manual compaction (docs/tools.md) of p1's transcript at the tools destination, over the
        # bus.
        # `xrmq context compact --tier` (the spelling); the destination defaults
        # to the config's only tools destination.
        compact = [*CLI, "context", "compact", "--config", str(CONFIG), "--participant", "p1"]
        done = await asyncio.to_thread(
            subprocess.run,
            [*compact, "--tier", "toolcall"],
            capture_output=True,
            text=True,
            env=env,
            timeout=60,
        )
        missing = await asyncio.to_thread(
            subprocess.run,
            [*compact, "--tier", "summary", "--destination", "nowhere", "--timeout", "1"],
            capture_output=True,
            text=True,
            env=env,
            timeout=60,
        )
        up.proc.send_signal(signal.SIGTERM)
        assert await up.wait(timeout=30) == 0, up.tail()
    finally:
        up.reap()
    assert all("a red multimeter" in scene["bench"] for scene in SCENES)
    assert done.returncode == 0, f"{done.stderr}\n{up.tail()}"
    assert (
        done.stdout.strip()
        == "compacted tool results at lab-tools: 0 reclaimed (0% of the transcript)"
    )
    assert missing.returncode == 1 and "'nowhere' is not a tools destination" in missing.stdout


def test_context_compact_tier_needs_a_destination_when_the_config_has_none_or_several(
    tmp_path: Path,
) -> None:
    from xrmq.actors.edge.config_loader import load_config
    from xrmq.actors.edge.context_commands import tools_destination

    assert tools_destination(load_config(CONFIG), None) == "lab-tools"
    assert tools_destination(load_config(CONFIG), "other") == "other"
    path = tmp_path / "edge.toml"
    path.write_text(
        '[destinations.a]\ndescription = "A."\nkind = "tools"\n'
        '[destinations.b]\ndescription = "B."\nkind = "tools"\n'
    )
    with pytest.raises(ValueError, match=r"--destination: name the tools destination .*: a, b\)"):
        tools_destination(load_config(path), None)
    done = subprocess.run(
        [
            *CLI,
            "context",
            "compact",
            "--participant",
            "p1",
            "--tier",
            "toolcall",
            "--section",
            "dialogue",
        ],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode != 0 and "--section: a context section" in done.stderr


@pytest.mark.parametrize(
    ("text", "message"),
    [
        (
            'kind = "agent"',
            "destinations.t.kind: must be one of 'conversation', 'tools', 'realtime', got 'agent'",
        ),
        (
            'kind = "tools"\ntool_servers = ["cam.era"]',
            "destinations.t.tool_servers: 'cam.era': must be 1-40 letters, digits or '-'",
        ),
        (
            'tool_servers = ["camera"]',
            'destinations.t.tool_servers: only a kind = "tools" destination calls tools',
        ),
        ('kind = "tools"\nmax_iterations = 0', "destinations.t.max_iterations: must be >= 1"),
        ('kind = "tools"\ntool_timeout_s = 0', "destinations.t.tool_timeout_s: must be > 0"),
        (
            'kind = "tools"\nauto_compact = { token_threshold = -1 }',
            "destinations.t.auto_compact.token_threshold: must be > 0",
        ),
        (
            'kind = "tools"\nauto_compact = { enabled = "no" }',
            "destinations.t.auto_compact.enabled: must be a boolean, got a string",
        ),
        (
            'kind = "tools"\nauto_compact = { threshold = 10 }',
            "destinations.t.auto_compact.threshold: unknown key; did you mean 'token_threshold'?",
        ),
        (
            'kind = "tools"\ncompactor = "no colon"',
            "destinations.t.compactor: must be package.module:Class, got 'no colon'",
        ),
        (
            "auto_compact = { enabled = false }",
            'destinations.t.auto_compact: only a kind = "tools" destination compacts',
        ),
    ],
)
def test_a_tools_destinations_keys_are_checked_naming_the_key(
    tmp_path: Path, text: str, message: str
) -> None:
    from xrmq.actors.edge.config import ConfigError
    from xrmq.actors.edge.config_loader import load_config

    path = tmp_path / "edge.toml"
    path.write_text(f'[destinations.t]\ndescription = "Tools."\n{text}\n')
    with pytest.raises(ConfigError) as caught:
        load_config(path)
    assert message in str(caught.value)


def test_the_tools_config_decodes_with_the_seed_defaults() -> None:
    from xrmq.actors.edge.config import AutoCompactConfig
    from xrmq.actors.edge.config_loader import load_config

    config = load_config(CONFIG)
    tools = config.destinations["lab-tools"]
    assert (tools.kind, tools.tool_servers, tools.max_iterations, tools.auto_compact) == (
        "tools",
        ["camera", "inventory"],
        8,
        AutoCompactConfig(enabled=True, token_threshold=192_000),
    )
    assert config.destinations["conversation"].kind == "conversation"


@pytest.mark.timeout(60)
async def test_the_camera_script_serves_a_scene_that_changes_over_time() -> None:
    import json

    from xrmq.actors.models import ToolCall
    from xrmq.actors.runtime import AgentRuntime
    from xrmq.actors.tools import ToolSet

    from buses import broker_process
    from tools.camera import PERIOD_S, scene_at

    assert scene_at(0)["bench"] != scene_at(PERIOD_S)["bench"]  # the simulated bench moves on
    env = {**os.environ, "XRMQ_LOG_LEVEL": "WARNING"}
    with broker_process() as bus:
        camera = subprocess.Popen(
            [sys.executable, str(CONFIG.parent / "tools" / "camera.py"), bus],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=env,
        )
        try:
            expect_line(camera, "camera: serving describe_view")
            async with AgentRuntime(bus) as runtime:
                tools = ToolSet(await ToolSet.discover(runtime, "camera", timeout_s=10))
                reply = await tools.call(runtime, ToolCall("c1", "camera__describe_view", "{}"))
        finally:
            reap(camera)
    view = json.loads(reply.content)
    assert "a red multimeter" in view["bench"] and {"time", "people", "lighting"} <= view.keys()
