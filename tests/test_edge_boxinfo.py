"""Client commands learn the running box's config from the box (issue 29, item 6): its
supervisor answers ``BoxInfoRequest`` on ``xrmq.box``; ``xrmq context compact --tier``
and ``/compact toolcall`` in ``xrmq chat`` take the box's tools destinations from it,
with no ``--config``."""

from __future__ import annotations

import asyncio
import math
import subprocess
import sys
import time
from pathlib import Path

import msgspec
import pytest

from xrmq.actors.edge.boxinfo import ask_box_info, box_info, config_of, tools_destination_of
from xrmq.actors.edge.chat import say
from xrmq.actors.edge.config import reply_wait_s
from xrmq.actors.edge.config_loader import decode_config, default_config, load_config
from xrmq.actors.runtime import Agent, AgentRuntime, Handlers, RuntimeContext
from xrmq.schemas import BoxInfo, BoxInfoRequest, DestinationInfo
from xrmq.topics import BOX_TOPIC

from buses import broker_process
from edge_box import UpProcess

CLI = [sys.executable, "-m", "xrmq.actors.cli"]


def tools_box(directory: Path) -> Path:
    """A box with a conversation and a tools destination (``lab``, no tool servers)."""
    path = directory / "edge.toml"
    path.write_text(f"""
[bus]
address = "ipc://{directory}/bus"
capture = false
[models.answers]
model = "offline"
time_to_first_token_s = 0
[context.topics.bench]
mode = "incremental"
[destinations.conversation]
description = "General assistant."
[destinations.lab]
description = "Lab tools."
kind = "tools"
[router]
default = "conversation"
[supervisor]
metrics_interval_s = 0.2
shutdown_timeout_s = 5
[processes.context]
roles = ["context"]
[processes.conversation]
roles = ["conversation"]
after = ["context"]
[processes.router]
roles = ["router"]
after = ["conversation"]
""")
    return path


def xrmq(*args: str, stdin: str = "") -> tuple[subprocess.CompletedProcess, float]:
    started = time.monotonic()
    result = subprocess.run([*CLI, *args], input=stdin, capture_output=True, text=True, timeout=60)
    return result, time.monotonic() - started


@pytest.mark.timeout(120)
async def test_compact_tier_and_chat_compact_take_the_tools_destinations_of_the_running_box(
    tmp_path,
):
    config = tools_box(tmp_path)
    bus = f"ipc://{tmp_path}/bus"
    up = UpProcess(config)
    try:
        await up.line("xrmq up: ready", timeout=100)
        async with AgentRuntime(bus, name="test-client") as client:
            info = await ask_box_info(client, timeout=10)
        # no --config: the built-in default has no tools destination, the box has one
        compacted, _ = await asyncio.to_thread(
            xrmq, "context", "compact", "--bus", bus, "--participant", "p1", "--tier", "toolcall"
        )
        chat, chat_s = await asyncio.to_thread(
            xrmq,
            "chat",
            "--bus",
            bus,
            stdin="/compact toolcall conversation\n/compact summary nowhere\n"
            "/compact toolcall\n/compact bench\n/quit\n",
        )
    finally:
        up.reap()
    assert info is not None
    assert msgspec.structs.replace(info, config_toml="") == BoxInfo(
        str(config),
        bus,
        (DestinationInfo("conversation", "conversation"), DestinationInfo("lab", "tools")),
    )
    assert config_of(info) == load_config(config)  # the whole config, as the box runs it
    assert compacted.returncode == 0, f"{compacted.stderr}\n{up.tail()}"
    assert (
        compacted.stdout.strip()
        == "compacted tool results at lab: 0 reclaimed (0% of the transcript)"
    )
    assert chat.returncode == 0, chat.stderr
    lines = chat.stdout.splitlines()
    assert lines[1:5] == [
        "xrmq chat: /compact: 'conversation' is not a tools destination "
        "(the box's tools destinations: lab)",
        "xrmq chat: /compact: 'nowhere' is not a tools destination "
        "(the box's tools destinations: lab)",
        "xrmq chat: compacted tool results at lab: 0 reclaimed (0% of the transcript)",
        # a topic of the box's config (the built-in default has none of that name)
        "bench: nothing to compact (NOTHING_TO_CONDENSE)",
    ], chat.stdout
    # Refused at once: asking the two destinations that are not tools ones would have cost
    # 10 s each (20 s in all); the process itself takes 3-10 s to start on a loaded box.
    assert chat_s < 19


@pytest.mark.timeout(120)
async def test_on_a_box_without_a_tools_destination_compact_tier_says_so_at_once(tmp_path):
    path = tmp_path / "edge.toml"
    bus = f"ipc://{tmp_path}/bus"
    path.write_text(f'[bus]\naddress = "{bus}"\n')  # the default box: no tools destination
    up = UpProcess(path)
    try:
        await up.line("xrmq up: ready", timeout=100)
        tier, _ = await asyncio.to_thread(
            xrmq, "context", "compact", "--bus", bus, "--participant", "p1", "--tier", "toolcall"
        )
        # the turn is answered by `conversation`, the default /compact toolcall would go to
        chat, _ = await asyncio.to_thread(
            xrmq, "chat", "--bus", bus, stdin="Hello there.\n/compact toolcall\n/quit\n"
        )
    finally:
        up.reap()
    assert tier.returncode == 2
    assert tier.stderr.strip() == (
        "xrmq context: --destination: name the tools destination "
        "(the box's tools destinations: none)"
    )
    assert chat.returncode == 0, chat.stderr
    assert chat.stdout.splitlines()[-1] == (
        "xrmq chat: /compact: name the tools destination (the box's tools destinations: none)"
    ), chat.stdout


async def test_without_a_supervisor_a_client_gets_no_box_info_and_keeps_its_own_default():
    with broker_process() as bus:
        async with AgentRuntime(bus, name="test-client") as client:
            assert await ask_box_info(client, timeout=0.3) is None


def test_the_tools_destination_a_compaction_goes_to():
    assert tools_destination_of(None, None, ["lab"], "the box's") == "lab"
    assert tools_destination_of(None, "lab", ["lab", "bench"], "the box's") == "lab"
    assert tools_destination_of("x", None, None, "the box's") == "x"  # unknown: asked as named
    assert tools_destination_of(None, "conversation", None, "the box's") == "conversation"
    with pytest.raises(ValueError, match=r"^name the tools destination \(the box's tools "):
        tools_destination_of(None, "conversation", ["lab", "bench"], "the box's")
    with pytest.raises(ValueError, match=r"^'x' is not a tools destination \(the box's tools"):
        tools_destination_of("x", None, [], "the box's")


def test_box_info_spells_out_the_config_or_leaves_it_out_when_it_has_no_toml_form():
    config = decode_config({"destinations": {"lab": {"description": "x", "kind": "tools"}}})
    info = box_info(config)
    assert info.tools_destinations() == ["lab"]
    from_box = config_of(info)
    assert from_box is not None  # the same config, every table it took from the default spelled
    assert msgspec.structs.replace(from_box, defaulted=config.defaulted) == config
    odd = {"model": "offline", "options": {"weight": math.inf}}  # passed to the provider as is
    unwritable = decode_config({"models": {"answers": odd}})
    info = box_info(unwritable)
    assert info.config_toml == "" and config_of(info) is None
    assert [d.name for d in info.destinations] == ["conversation"]


class _Supervisor(Agent):
    """Answers ``BoxInfoRequest`` as ``xrmq up``'s supervisor does, for ``config``."""

    def __init__(self, config) -> None:
        self.info = box_info(config)

    def handlers(self) -> Handlers:
        return {BOX_TOPIC: self.on_box_info}

    async def on_box_info(self, message: BoxInfoRequest, ctx: RuntimeContext) -> BoxInfo:
        return self.info


@pytest.mark.timeout(60)
async def test_say_without_timeout_or_config_waits_as_long_as_the_running_box_says():
    """Issue 29 item 3: the client's default wait follows the box's (its model timeout and a
    margin), not the built-in config's: here a box whose model gives up after 1 s."""
    config = decode_config({"models": {"answers": {"model": "offline", "timeout_s": 1}}})
    wait = reply_wait_s(config)
    assert wait < reply_wait_s(default_config())
    with broker_process() as bus:
        box = AgentRuntime(bus, name="box")
        box.register("supervisor", _Supervisor(config))
        async with box:  # no router: nothing ever answers, so say waits its whole wait
            began = time.monotonic()
            with pytest.raises(TimeoutError, match=rf"within {wait:g}s \(no reply at all\)"):
                await say(
                    bus,
                    "p1",
                    "Anyone?",
                    timeout=reply_wait_s(default_config()),
                    router_silence_s=None,
                    follow_box=True,
                )
            assert wait <= time.monotonic() - began < wait + 5
