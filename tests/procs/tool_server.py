"""Tool-server process: serves tool server "lab" on the bus.

Tools: ``reading`` (returns a reading), ``broken`` (raises), ``stall`` (never returns,
until cancelled), ``trend`` (streams a first chunk, then waits until ``release`` is
called, then streams the last one). argv: BUS. Prints "ready" once serving; runs until killed.
"""

import asyncio
import sys

import msgspec

from xrmq.actors.runtime import AgentRuntime, run
from xrmq.actors.tools import Tool, serve_tools


class Sensor(msgspec.Struct):
    name: str = "kettle"


def reading(args: Sensor) -> dict[str, object]:
    return {"sensor": args.name, "celsius": 85}


def broken(args: Sensor) -> str:
    raise RuntimeError(f"{args.name} sensor unplugged")


async def stall(args: Sensor) -> str:
    await asyncio.Event().wait()
    return "never"


RELEASED = asyncio.Event()


async def trend(args: Sensor):
    RELEASED.clear()
    yield f"{args.name}: 80 C, "
    await RELEASED.wait()
    yield "then 85 C"


def release(args: Sensor) -> str:
    RELEASED.set()
    return "released"


async def main() -> None:
    runtime = AgentRuntime(sys.argv[1], name="tool-server")
    serve_tools(
        runtime,
        "lab",
        [
            Tool("reading", "Read a sensor.", Sensor, reading),
            Tool("broken", "A broken sensor.", Sensor, broken),
            Tool("stall", "A sensor that never answers.", Sensor, stall),
            Tool("trend", "A sensor's trend, streamed.", Sensor, trend),
            Tool("release", "Let the trend finish.", Sensor, release),
        ],
    )
    async with runtime:
        print("ready", flush=True)
        await asyncio.Event().wait()


run(main())
