"""The tool-server process of ``bench.tools_bench``: tool server ``bench`` and a plain ask.

``python -m bench.tools_workers BUS``: serves tool ``echo`` (its argument back) as tool
server ``bench``, and answers asks on ``bench.ping`` with the same text, so the bench
compares a tool call with the bus ask underneath it on one process. Prints ``ready``.
"""

from __future__ import annotations

import asyncio
import sys

import msgspec

from xrmq.actors.runtime import Agent, AgentRuntime, RuntimeContext, run, subscribe
from xrmq.actors.tools import Tool, serve_tools
from xrmq.topics import Topic


class Echo(msgspec.Struct):
    text: str


class Ping(msgspec.Struct):
    text: str


PING = Topic("bench.ping", Ping)


def echo(args: Echo) -> str:
    return args.text


ECHO = Tool("echo", "Return the text.", Echo, echo)


class Pinger(Agent):
    @subscribe(PING)
    async def on_ping(self, message: Ping, ctx: RuntimeContext) -> str:
        return message.text


async def main(bus: str) -> None:
    runtime = AgentRuntime(bus, name="bench-tools")
    serve_tools(runtime, "bench", [ECHO])
    runtime.register("pinger", Pinger())
    async with runtime:
        print("ready", flush=True)
        await asyncio.Event().wait()


if __name__ == "__main__":
    run(main(sys.argv[1]))
