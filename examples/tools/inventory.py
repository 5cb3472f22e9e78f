"""An inventory tool: how many of an item the lab has in stock (role ``tools.inventory:role``)."""

from __future__ import annotations

import re

import msgspec

from xrmq.actors.runtime import AgentRuntime
from xrmq.actors.tools import Tool, serve_tools

STOCK = {
    "multimeter": (3, "shelf A2"),
    "soldering iron": (2, "shelf A1"),
    "resistor": (480, "drawer R3"),
    "oscilloscope": (1, "cart 2"),
    "sensor board": (6, "cabinet C"),
}


class Item(msgspec.Struct):
    """Arguments of ``lookup``."""

    item: str
    """The item, or a sentence naming it."""


def lookup(args: Item) -> dict[str, object]:
    """Stock and location of every known item the text names (plural or singular)."""
    text = args.item.lower()
    found: dict[str, object] = {
        name: {"in_stock": count, "where": where}
        for name, (count, where) in STOCK.items()
        if re.search(rf"\b{re.escape(name)}s?\b", text)
    }
    if not found:
        return {"error": f"no such item in the inventory; known items: {', '.join(STOCK)}"}
    return found


TOOLS = [
    Tool(
        "lookup",
        "Look up how many of an item are in stock in the inventory, and where.",
        Item,
        lookup,
    )
]


def role(runtime: AgentRuntime, config: object, process: object) -> None:
    """The edge-box role: serve the inventory as tool server ``inventory``."""
    serve_tools(runtime, "inventory", TOOLS)
