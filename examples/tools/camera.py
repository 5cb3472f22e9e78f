"""A camera process serving ``describe_view``: a simulated lab bench that changes over time.

Run by ``xrmq up examples/tools.toml`` (role ``tools.camera:role``), or alone against a
running bus: ``python examples/tools/camera.py [BUS]``. The scene moves on every
``PERIOD_S`` seconds, so asking twice can give two answers, as with a real camera.
"""

from __future__ import annotations

import asyncio
import sys
import time
from typing import Any

import msgspec

from xrmq.actors.runtime import AgentRuntime, run
from xrmq.actors.tools import Tool, serve_tools

PERIOD_S = 30.0

SCENES = (
    {
        "bench": ["a red multimeter", "a soldering iron in its stand", "two 10 kOhm resistors"],
        "people": "nobody around",
        "lighting": "bright",
    },
    {
        "bench": ["a red multimeter", "an oscilloscope probe", "a half-assembled sensor board"],
        "people": "one technician soldering",
        "lighting": "bright",
    },
    {
        "bench": ["a red multimeter", "the sensor board, assembled", "a coffee mug"],
        "people": "nobody around",
        "lighting": "dimmed",
    },
)


class View(msgspec.Struct):
    """Arguments of ``describe_view``."""

    focus: str = ""
    """What to look at; the whole view when empty."""


def scene_at(now_s: float) -> dict[str, Any]:
    """The simulated scene at ``now_s`` (Unix seconds)."""
    index = int(now_s // PERIOD_S) % len(SCENES)
    return {"time": time.strftime("%H:%M:%S", time.gmtime(now_s)), **SCENES[index]}


def describe_view(args: View) -> dict[str, Any]:
    return scene_at(time.time())


TOOLS = [
    Tool(
        "describe_view",
        "Describe what the camera sees on the lab bench right now.",
        View,
        describe_view,
    )
]


def role(runtime: AgentRuntime, config: object, process: object) -> None:
    """The edge-box role: serve the camera's tools as tool server ``camera``."""
    serve_tools(runtime, "camera", TOOLS)


async def main(bus: str) -> None:
    runtime = AgentRuntime(bus, name="camera")
    role(runtime, None, None)
    async with runtime:
        print("camera: serving describe_view", flush=True)
        await asyncio.Event().wait()


if __name__ == "__main__":
    run(main(sys.argv[1] if len(sys.argv) > 1 else "default"))
