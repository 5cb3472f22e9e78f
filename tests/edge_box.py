"""Test support: an ``xrmq up`` edge box of the built-in roles, its output lines, and turns;
``write_config``/``start_up``: a box of the test roles (``tests/procs/edge_roles.py``).

``UpProcess`` runs ``xrmq up CONFIG`` and reads its output on a thread (so the
supervisor never blocks on a full pipe), handing each line to the test's event loop;
``line(prefix)`` waits for the next line starting with ``prefix``. The children log at
WARNING (``XRMQ_CHILD_LOG_LEVEL=INFO`` shows more when a test needs debugging). ``Front`` is a text
front end on the box's bus: it asks turns and follows their replies (``ReplyCollector``).
"""

from __future__ import annotations

import asyncio
import os
import shutil
import sqlite3
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

from xrmq.actors.edge.replies import ReplyCollector, Turn, ask
from xrmq.actors.runtime import AgentRuntime

from buses import PROCS


def stack_config(
    directory: Path,
    *,
    tokens_per_second: float = 8.0,
    shutdown_timeout_s: float = 5,
    supervisor: str = "",
    router: str = "",
    extra: str = "",
) -> Path:
    """A config of the built-in roles (no compaction process) on a private ipc bus in ``directory``.

    Two start layers (context, conversation and renderer; then the router), so the box
    is up soon and the router still stops first.

    The offline model streams ``tokens_per_second`` words a second, so an answer lasts
    long enough to act in the middle of it.
    """
    path = directory / "edge.toml"
    path.write_text(f"""
[bus]
address = "ipc://{directory}/bus"
capture = false
[models.answers]
model = "offline"
time_to_first_token_s = 0.05
tokens_per_second = {tokens_per_second}
[context.topics.notes]
mode = "incremental"
[destinations.conversation]
description = "General assistant."
[router]
default = "conversation"
{router}
[supervisor]
metrics_interval_s = 0.2
shutdown_timeout_s = {shutdown_timeout_s}
{supervisor}
[supervisor.restart]
backoff_initial_s = 0.05
[processes.context]
roles = ["context"]
[processes.conversation]
roles = ["conversation"]
[processes.router]
roles = ["router"]
after = ["conversation"]
[processes.renderer]
roles = ["renderer"]
{extra}
""")
    return path


class UpProcess:
    """``xrmq up CONFIG`` with its output lines delivered to the test's loop; ``env`` adds
    to (or overrides) the process's environment."""

    def __init__(self, config: Path, env: dict[str, str] | None = None) -> None:
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "xrmq.actors.cli", "up", str(config)],
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            env={
                **os.environ,
                "PYTHONPATH": str(PROCS),
                "XRMQ_LOG_LEVEL": os.environ.get("XRMQ_CHILD_LOG_LEVEL", "WARNING"),
                **(env or {}),
            },
        )
        self.lines: list[tuple[float, str]] = []
        """Every line so far, with its ``time.monotonic()`` arrival."""
        self.ended = asyncio.Event()
        self._loop = asyncio.get_running_loop()
        self._changed = asyncio.Event()
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        assert self.proc.stdout is not None  # started with a pipe
        for line in self.proc.stdout:
            self._loop.call_soon_threadsafe(self._add, time.monotonic(), line.rstrip("\n"))
        self._loop.call_soon_threadsafe(self._end)

    def _end(self) -> None:
        self.ended.set()
        self._changed.set()

    def _add(self, at: float, line: str) -> None:
        self.lines.append((at, line))
        self._changed.set()

    async def line(
        self, prefix: str, *, after: int = 0, timeout: float = 40
    ) -> tuple[int, float, str]:
        """The first line from index ``after`` on with ``prefix``: (index, arrival, text)."""

        async def find() -> tuple[int, float, str]:
            start = after
            while True:
                for index in range(start, len(self.lines)):
                    at, text = self.lines[index]
                    if text.startswith(prefix):
                        return index, at, text
                start = len(self.lines)
                if self.ended.is_set():
                    raise AssertionError(f"xrmq up ended without {prefix!r}:\n{self.tail()}")
                self._changed.clear()
                await self._changed.wait()

        try:
            return await asyncio.wait_for(find(), timeout)
        except TimeoutError:
            raise AssertionError(f"no {prefix!r} within {timeout}s:\n{self.tail()}") from None

    def texts(self) -> list[str]:
        return [text for _, text in self.lines]

    def tail(self, count: int = 40) -> str:
        return "\n".join(self.texts()[-count:])

    async def wait(self, timeout: float = 30) -> int:
        await asyncio.wait_for(self.ended.wait(), timeout)
        return await asyncio.to_thread(self.proc.wait, timeout)

    def reap(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()


class Front:
    """A text front end on the bus: ``turn(pid, text)`` asks; the ``Turn`` fills in with replies."""

    def __init__(self, bus: str) -> None:
        self.collector = ReplyCollector()
        self.runtime = AgentRuntime(bus, name=f"front-{os.getpid()}")
        self.runtime.register("replies", self.collector)

    async def __aenter__(self) -> Front:
        await self.runtime.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.runtime.stop()

    def turn(self, participant_id: str, text: str, *, traceparent: str | None = None) -> Turn:
        return ask(self.runtime, self.collector, participant_id, text, traceparent=traceparent)


def journal_rows_of(directory: Path, participant: str) -> list[tuple[str, str]]:
    """Every journal row of ``participant`` in the stack's context journals, as (table, row).

    A running context process holds its journal exclusively, so this reads a copy of the
    database and its write-ahead log (a row is journaled before it is acknowledged).
    """
    rows: list[tuple[str, str]] = []
    with tempfile.TemporaryDirectory() as copies:
        for path in sorted((directory / "state").glob("*.sqlite3")):
            copy = Path(copies) / path.name
            shutil.copyfile(path, copy)
            wal = path.with_name(path.name + "-wal")
            if wal.exists():
                shutil.copyfile(wal, copy.with_name(copy.name + "-wal"))
            db = sqlite3.connect(copy)
            try:
                tables = [
                    name
                    for (name,) in db.execute("SELECT name FROM sqlite_master WHERE type = 'table'")
                ]
                for table in tables:
                    columns = [row[1] for row in db.execute(f"PRAGMA table_info({table})")]
                    if "participant" in columns:
                        query = f"SELECT * FROM {table} WHERE participant = ?"
                        rows += [(table, repr(row)) for row in db.execute(query, (participant,))]
            finally:
                db.close()
    return rows


# -- a box of the test roles (tests/procs/edge_roles.py), for the supervisor's own tests ------


def write_config(directory: Path, processes: str, restart: str = "") -> Path:
    path = directory / "edge.toml"
    path.write_text(f"""
[bus]
address = "ipc://{directory}/bus"
[supervisor]
metrics_interval_s = 0.2
shutdown_timeout_s = 5
[supervisor.restart]
backoff_initial_s = 0.05
{restart}
{processes}
""")
    return path


def start_up(config: Path) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, "-m", "xrmq.actors.cli", "up", str(config)],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        env={**os.environ, "PYTHONPATH": str(PROCS)},
    )
