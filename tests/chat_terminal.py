"""Test support: ``xrmq chat`` on a real pseudo-terminal, and an edge box whose tools
destination asks an OpenAI-compatible server on loopback (``openai_server``).

``chat_on_terminal(bus)`` starts ``xrmq chat --bus BUS`` with a pseudo-terminal as its
stdin and stdout and yields the test's end (``Terminal``) with the process; on leaving it
reaps the chat and closes both ends. ``provider_box_config`` is the default box with one
more tools destination whose model is the server at ``api_base`` (key from
``XRMQ_TEST_KEY``), routed by the rules so its keywords choose it.
"""

from __future__ import annotations

import asyncio
import os
import pty
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from buses import reap


class Terminal:
    """The test's end of a pseudo-terminal: everything the chat printed, read as it comes.
    ``slave`` is the chat's end (its terminal settings can be read there)."""

    def __init__(self, master: int, slave: int) -> None:
        self.master = master
        self.slave = slave
        self.output = ""

    async def read_until(self, text: str, start: int = 0) -> int:
        """Read until ``text`` appears at or after ``start``; where it ends."""
        while (found := self.output.find(text, start)) < 0:
            chunk = await asyncio.to_thread(os.read, self.master, 4096)
            if not chunk:
                raise AssertionError(f"the chat closed the terminal; printed {self.output!r}")
            self.output += chunk.decode(errors="replace")
        return found + len(text)

    def type(self, text: str) -> None:
        os.write(self.master, text.encode())


@contextmanager
def chat_on_terminal(
    bus: str, *args: str, env: dict[str, str] | None = None
) -> Iterator[tuple[Terminal, subprocess.Popen]]:
    """``xrmq chat --bus BUS ARGS...`` on a pseudo-terminal (logging at ERROR, ``env`` added)."""
    master, slave = pty.openpty()
    chat = subprocess.Popen(
        [sys.executable, "-m", "xrmq.actors.cli", "chat", "--bus", bus, *args],
        stdin=slave,
        stdout=slave,
        stderr=subprocess.PIPE,
        env={**os.environ, "XRMQ_LOG_LEVEL": "ERROR", **(env or {})},
    )
    try:
        yield Terminal(master, slave), chat
    finally:
        reap(chat)
        os.close(slave)
        os.close(master)


def provider_box_config(api_base: str, name: str, description: str) -> Any:
    """The default box plus tools destination ``name`` (keyword "bench") asking ``api_base``."""
    import msgspec

    from xrmq.actors.edge.config import DestinationConfig
    from xrmq.actors.edge.config_loader import default_config
    from xrmq.actors.models import parse_model_spec

    base = default_config()
    tools = DestinationConfig(
        description=description,
        kind="tools",
        keywords=["bench"],
        model=parse_model_spec(
            {"model": "openai/m", "api_base": api_base, "api_key_env": "XRMQ_TEST_KEY"}
        ),
    )
    return msgspec.structs.replace(
        base,
        destinations={**base.destinations, name: tools},
        router=msgspec.structs.replace(base.router, decisions="rules"),
    )
