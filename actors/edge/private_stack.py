"""An edge stack on a private bus, started and stopped by the command that needs it.

``xrmq demo`` (and ``--voice``), ``xrmq chat --private-stack`` and the voice bench use it.

It is ``xrmq up`` run programmatically: the same ``Supervisor`` starts the broker and
every process of the config as separate OS processes, but on a private ipc bus in a
fresh temporary directory (mode 0700), so it never meets a running ``xrmq up`` on the
default bus. The config is written there for the children (``xrmq run NAME --config``),
and so are the context journals (unless the config names a ``state_dir``).

The supervisor's lines (its own and every child's) are kept, not printed, unless an
``echo`` stream is given: a command shows its own output, and names the last lines
when something fails. ``failed`` is set when the supervisor stops by itself (a
process it gave up on with ``on_give_up = "stop_box"``, a child that could not
start); with ``max_crashes = 1`` and ``stop_box`` (the demo's config) that is the
first crash of any process.
"""

from __future__ import annotations

import asyncio
import os
import re
import shutil
import signal
import sys
import tempfile
import time
from collections import deque
from pathlib import Path
from typing import TextIO, cast

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
        self.written = 0
        """Complete lines so far (``lines`` keeps only the latest)."""
        self._changed = asyncio.Event()

    def write(self, text: str) -> int:
        *complete, self._partial = (self._partial + text).split("\n")
        for line in complete:
            self.lines.append(line)
            if self.echo is not None:
                print(line, file=self.echo, flush=True)
            if line.startswith(_READY):
                self.ready_line = line
                self.ready.set()
            self.written += 1
            self._changed.set()
        return len(text)

    async def wait_line(self, prefix: str, after: int) -> str:
        """The first line starting with ``prefix`` written after the ``after``-th line."""
        while True:
            fresh = list(self.lines)[max(0, len(self.lines) - (self.written - after)) :]
            for line in fresh:
                if line.startswith(prefix):
                    return line
            self._changed.clear()
            await self._changed.wait()

    def flush(self) -> None:
        pass


class PrivateStack:
    """``async with PrivateStack(config) as stack:`` the stack of ``config`` on a private bus.

    ``stack.bus`` is the bus to connect to; ``stack.config`` the config as the children
    read it. Entering waits until every process reported ready (``StackError`` with
    the last supervisor lines if it stops first); leaving stops every process in
    order and removes the directory, bus sockets included.
    """

    def __init__(
        self, config: EdgeConfig, *, echo: TextIO | None = None, python: str = sys.executable
    ) -> None:
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

    def pid(self, label: str) -> int:
        """The pid of the process ``label`` (``context``, ``conversation.1``...) now running."""
        pattern = re.compile(rf"(?:^|\s){re.escape(label)}(?:=| pid=)(\d+)")
        for line in reversed(self._out.lines):
            starts = (
                "xrmq up: ready",
                f"xrmq up: started {label} ",
                f"xrmq up: restarted {label} ",
            )
            if line.startswith(starts):
                found = pattern.search(line)
                if found:
                    return int(found[1])
        raise StackError(f"no process {label!r} in the stack")

    async def kill(self, label: str, *, timeout: float = 30.0) -> float:
        """SIGKILL the process ``label`` and wait until the supervisor restarted it and it
        reported ready again; return the seconds from the kill to ready."""
        after = self._out.written
        started = time.monotonic()
        os.killpg(self.pid(label), signal.SIGKILL)  # the process leads its own group
        async with asyncio.timeout(timeout):
            await self._out.wait_line(f"xrmq up: restarted {label} pid=", after)
        return time.monotonic() - started

    def tail(self, count: int = 30) -> str:
        """The last ``count`` supervisor lines (its own and the children's), for error messages."""
        return "\n".join(list(self._out.lines)[-count:])

    async def __aenter__(self) -> PrivateStack:
        self.directory = Path(tempfile.mkdtemp(prefix="xrmq-stack-"))  # mode 0700
        try:
            bus = BusConfig(address=f"ipc://{self.directory}/bus", capture=False)
            requested = msgspec.structs.replace(self._requested, bus=bus)
            if requested.context.state_dir is None:  # the journals go with the stack
                journals = str(self.directory / "state")
                context = msgspec.structs.replace(requested.context, state_dir=journals)
                requested = msgspec.structs.replace(requested, context=context)
            self.config = write_config(requested, self.directory / "edge.toml")
            self._supervisor = Supervisor(
                self.config,
                str(self.directory / "edge.toml"),
                out=cast(TextIO, self._out),  # it only writes lines
                python=self._python,
            )
            self._task = asyncio.create_task(
                self._supervisor.run(), name="xrmq-private-stack-supervisor"
            )
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
                assert self._supervisor is not None  # the task runs it
                self._supervisor.stop()
                await self._task
        finally:
            if self.directory is not None:
                shutil.rmtree(self.directory, ignore_errors=True)
