"""Roles for the edge-box tests, named in test configs as ``edge_roles:<function>``.

``echo`` hosts a keyed kind answering asks on ``edge.echo`` with the runtime's name,
on this replica's shard, so a test sees which process (and which shard) answered;
``idle`` hosts nothing (a process that only heartbeats); ``fail`` makes its process
exit before it is ready (a crash, exit 1); ``misconfigured`` makes it exit with a
configuration error (exit 2, fatal); ``crash`` makes it crash (exit 3) just after it is ready.
"""

from __future__ import annotations

import asyncio
import os

from xrmq.actors.runtime import Agent, RuntimeContext, subscribe
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


def misconfigured(runtime, config, process) -> None:
    """A configuration error found only once the process starts (``xrmq up``'s checks pass)."""
    raise ValueError("edge_roles.misconfigured: setting 'threshold' must be > 0")


class _Crasher(Agent):
    async def on_start(self) -> None:
        # Runs once the process has printed its readiness line: the first time it yields.
        asyncio.get_running_loop().call_soon(os._exit, 3)


def crash(runtime, config, process) -> None:
    runtime.register("crasher", _Crasher())
