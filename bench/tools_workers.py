"""The tool-server process of ``bench.tools_bench``: tool server ``bench`` and a plain ask.

``python -m bench.tools_workers BUS STATE_DIR``: serves tool ``echo`` (its argument
back) and the streaming ``chunks`` (its argument back in four chunks) as tool server
``bench``, and answers asks on ``bench.ping`` with the same text, so the bench compares
a tool call with the bus ask underneath it on one process; and hosts two transcript
stores, ``bench-journal`` journaled in a context store under STATE_DIR and
``bench-memory`` not journaled, for the cost of journaling a transcript write. Prints
``ready``.
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


async def chunks(args: Echo):
    for index in range(4):
        yield f"{index}:{args.text};"


CHUNKS = Tool("chunks", "Return the text in four chunks.", Echo, chunks)


class Pinger(Agent):
    @subscribe(PING)
    async def on_ping(self, message: Ping, ctx: RuntimeContext) -> str:
        return message.text


async def main(bus: str, state_dir: str) -> None:
    from pathlib import Path

    from xrmq.actors.context.store import open_store
    from xrmq.actors.tools.store import register_transcripts

    runtime = AgentRuntime(bus, name="bench-tools")
    serve_tools(runtime, "bench", [ECHO, CHUNKS])
    runtime.register("pinger", Pinger())
    store = open_store(Path(state_dir) / "bench-tools.sqlite3")
    register_transcripts(runtime, "bench-journal", store=store)
    register_transcripts(runtime, "bench-memory")
    try:
        async with runtime:
            print("ready", flush=True)
            await asyncio.Event().wait()
    finally:
        store.close()


if __name__ == "__main__":
    run(main(sys.argv[1], sys.argv[2]))
