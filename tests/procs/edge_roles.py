"""Roles for the edge-box tests, named in test configs as ``edge_roles:<function>``.

``echo`` hosts a keyed kind answering asks on ``edge.echo`` with the runtime's name,
on this replica's shard, so a test sees which process (and which shard) answered;
``idle`` hosts nothing (a process that only heartbeats); ``fail`` makes its process
exit before it is ready; ``crash`` makes it crash (exit 3) just after it is ready;
``lab_camera`` serves a camera agent's ``describe_view`` tool as tool server ``camera``.
"""

from __future__ import annotations

import asyncio
import os

import msgspec

from xrmq.actors.runtime import Agent, RuntimeContext, subscribe
from xrmq.actors.tools import Tool
from xrmq.schemas import ConversationContextUpdate
from xrmq.topics import context_topic

ECHO_TOPIC = context_topic("edge.echo")


class Echo(Agent):
    def __init__(self, key: str) -> None:
        self.key = key

    @subscribe(ECHO_TOPIC)
    async def on_echo(self, message: ConversationContextUpdate, ctx: RuntimeContext) -> str:
        return f"{ctx.runtime.name}:{message.text}"


def echo(runtime, config, process) -> None:
    runtime.register_keyed("echo", Echo, shard=process.shard, shards=process.shards)


def idle(runtime, config, process) -> None:
    """Registers no actor."""


def fail(runtime, config, process) -> None:
    raise RuntimeError("this role always fails")


class _Crasher(Agent):
    async def on_start(self) -> None:
        # Runs once the process has printed its readiness line: the first time it yields.
        asyncio.get_running_loop().call_soon(os._exit, 3)


def crash(runtime, config, process) -> None:
    runtime.register("crasher", _Crasher())


class View(msgspec.Struct):
    """``describe_view`` takes no arguments."""


class LabCamera(Agent):
    """A camera agent declaring its tool (``Agent(tools=...)``), served as tool server
    ``camera``; each view is long enough for tier 1 to reclaim it."""

    def __init__(self) -> None:
        self.views = 0
        super().__init__(
            tools=[
                Tool(
                    "describe_view",
                    "Describe what the camera sees on the bench.",
                    View,
                    self.describe,
                )
            ],
            tool_server="camera",
        )

    def describe(self, args: View) -> str:
        self.views += 1
        return (
            f"View {self.views}: a red multimeter next to a soldering iron. "
            + "The rest of the bench is tidy. " * 12
        )


def lab_camera(runtime, config, process) -> None:
    runtime.register("lab-camera", LabCamera())
