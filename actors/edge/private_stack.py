"""An edge stack started and stopped by the command that needs it (``xrmq demo``, ``xrmq chat --private-stack``).

It is ``xrmq up`` run programmatically: the same ``Supervisor`` starts the broker and
every process of the config as separate OS processes, but on a private ipc bus in a
fresh temporary directory (mode 0700), so it never meets a running ``xrmq up`` on the
default bus. The config is written there for the children (``xrmq run NAME --config``).

The supervisor's lines (its own and every child's) are kept, not printed, unless an
``echo`` stream is given: a command shows its own output, and names the last lines
when something fails. ``failed`` is set when the supervisor stops by itself (a
process it gave up on, a child that could not start); with ``max_crashes = 1`` in
the config that is the first crash of any process.
"""

from __future__ import annotations

import asyncio
import shutil
import sys
import tempfile
from collections import deque
from pathlib import Path
from typing import TextIO

import msgspec

from .config import BusConfig, EdgeConfig
from .configfile import write_config
from .supervisor import Supervisor

_READY = "xrmq up: ready"


class StackError(RuntimeError):
    """The private stack did not start, or stopped while it was needed."""


class _Lines:
    """The supervisor's ``out``: keeps the latest lines, optionally echoes them, spots readiness."""

    def __init__(self, echo: TextIO | None, keep: int = 400) -> None:
        self.lines: deque[str] = deque(maxlen=keep)
        self.echo = echo
        self.ready = asyncio.Event()
        self.ready_line = ""
        self._partial = ""

    def write(self, text: str) -> int:
        *complete, self._partial = (self._partial + text).split("\n")
        for line in complete:
            self.lines.append(line)
            if self.echo is not None:
                print(line, file=self.echo, flush=True)
            if line.startswith(_READY):
                self.ready_line = line
                self.ready.set()
        return len(text)

    def flush(self) -> None:
        pass


class PrivateStack:
    """``async with PrivateStack(config) as stack:`` the stack of ``config`` on a private bus.

    ``stack.bus`` is the bus to connect to; ``stack.config`` the config as the children
    read it. Entering waits until every process reported ready (``StackError`` with
    the last supervisor lines if it stops first); leaving stops every process in
    order and removes the directory, bus sockets included.
    """

    def __init__(self, config: EdgeConfig, *, echo: TextIO | None = None, python: str = sys.executable) -> None:
        self._requested = config
        self._python = python
        self._out = _Lines(echo)
        self.directory: Path | None = None
        self.config: EdgeConfig | None = None
        self._supervisor: Supervisor | None = None
        self._task: asyncio.Task[int] | None = None

    @property
    def bus(self) -> str:
        if self.config is None:
            raise StackError("the private stack is not started")
        return self.config.bus.address

    @property
    def ready_line(self) -> str:
        """The supervisor's readiness line: the bus and each process's pid."""
        return self._out.ready_line

    def tail(self, count: int = 30) -> str:
        """The last ``count`` supervisor lines (its own and the children's), for error messages."""
        return "\n".join(list(self._out.lines)[-count:])

    async def __aenter__(self) -> "PrivateStack":
        self.directory = Path(tempfile.mkdtemp(prefix="xrmq-stack-"))  # mode 0700
        try:
            bus = BusConfig(address=f"ipc://{self.directory}/bus", capture=False)
            self.config = write_config(msgspec.structs.replace(self._requested, bus=bus), self.directory / "edge.toml")
            self._supervisor = Supervisor(self.config, str(self.directory / "edge.toml"), out=self._out,
                                          python=self._python)
            self._task = asyncio.create_task(self._supervisor.run(), name="xrmq-private-stack-supervisor")
            ready = asyncio.create_task(self._out.ready.wait())
            await asyncio.wait([ready, self._task], return_when=asyncio.FIRST_COMPLETED)
            ready.cancel()
            if not self._out.ready.is_set():
                raise StackError(f"the edge stack did not start:\n{self.tail()}")
        except BaseException:
            await self.__aexit__()
            raise
        return self

    async def wait_failed(self) -> str:
        """Return (with the reason) once the stack stopped by itself; never while it runs."""
        assert self._task is not None
        await asyncio.shield(self._task)
        return f"the edge stack stopped:\n{self.tail()}"

    @property
    def failed(self) -> bool:
        return self._task is not None and self._task.done()

    async def __aexit__(self, *exc: object) -> None:
        try:
            if self._task is not None:
                # Supervisor.run() stops on its stop event (what SIGINT/SIGTERM set for `xrmq up`).
                self._supervisor.stop()
                await self._task
        finally:
            if self.directory is not None:
                shutil.rmtree(self.directory, ignore_errors=True)
