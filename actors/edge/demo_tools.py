"""The demo's tool process: a bench camera served on the bus as tool server ``camera``.

A fixed scene, so the demo's tool turn can check its answer; ``examples/tools/`` has the
camera whose scene changes over time, and an inventory.
"""

from __future__ import annotations

from typing import Any

import msgspec

from xrmq.actors.runtime import AgentRuntime
from xrmq.actors.tools import Tool, serve_tools

BENCH = {"bench": ["a red multimeter", "a soldering iron in its stand"], "lighting": "bright"}


class View(msgspec.Struct):
    """Arguments of ``describe_view``: none needed."""


def describe_view(args: View) -> dict[str, Any]:
    return BENCH


def camera_role(runtime: AgentRuntime, config: object, process: object) -> None:
    """Serve ``describe_view`` as tool server ``camera``."""
    describe = Tool(
        "describe_view", "Describe what the camera sees on the bench.", View, describe_view
    )
    serve_tools(runtime, "camera", [describe])
