"""Worker processes for cross-process suites: a line protocol over stdin/stdout.

A worker prints one line per event (``ready``, a JSON result...) and reads commands
from stdin. Its stderr goes to a file, shown when it fails, so a chatty worker can
never block on a full pipe. ``pin`` moves every thread of a running worker (libzmq's
I/O threads included) to a set of CPUs, so one set of processes can be measured both
sharing the cores and pinned, side by side.
"""

from __future__ import annotations

import json
import os
import queue
import shutil
import subprocess
import sys
import tempfile
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
ALL_CPUS = frozenset(os.sched_getaffinity(0))
CLOCK_TICKS = os.sysconf("SC_CLK_TCK")


class WorkerError(RuntimeError):
    """A worker exited, or did not answer in time."""


class Worker:
    """One child process; ``argv`` after the interpreter (e.g. ``-m bench.bus_workers ...``)."""

    def __init__(self, name: str, *argv: str, env: dict[str, str] | None = None) -> None:
        self.name = name
        self._stderr = tempfile.TemporaryFile(mode="w+")
        self.proc = subprocess.Popen(
            [sys.executable, *argv],
            cwd=ROOT,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=self._stderr,
            text=True,
            bufsize=1,
            env={**os.environ, "XRMQ_LOG_LEVEL": "WARNING", **(env or {})},
        )
        self._lines: queue.Queue[str | None] = queue.Queue()
        threading.Thread(target=self._pump, name=f"bench-{name}-stdout", daemon=True).start()

    def _pump(self) -> None:
        assert self.proc.stdout is not None  # started with a pipe
        for line in self.proc.stdout:
            self._lines.put(line.rstrip("\n"))
        self._lines.put(None)

    def expect(self, prefix: str, timeout: float = 30.0) -> str:
        """The next stdout line starting with ``prefix`` (other lines are skipped)."""
        while True:
            try:
                line = self._lines.get(timeout=timeout)
            except queue.Empty:
                raise WorkerError(
                    f"{self.name}: no {prefix!r} line within {timeout}s{self._tail()}"
                ) from None
            if line is None:
                raise WorkerError(
                    f"{self.name}: exited ({self.proc.wait()}) before {prefix!r}{self._tail()}"
                )
            if line.startswith(prefix):
                return line

    def result(self, timeout: float = 60.0) -> dict[str, Any]:
        """The next JSON line."""
        return json.loads(self.expect("{", timeout))

    def command(self, line: str) -> None:
        assert self.proc.stdin is not None  # started with a pipe
        self.proc.stdin.write(line + "\n")
        self.proc.stdin.flush()

    def pin(self, cpus: frozenset[int]) -> None:
        """Restrict every current thread of the worker to ``cpus``."""
        for tid in os.listdir(f"/proc/{self.proc.pid}/task"):
            try:
                os.sched_setaffinity(int(tid), cpus)
            except ProcessLookupError:
                pass  # a thread that just ended

    def cpu_seconds(self) -> float:
        """User plus system CPU time the worker has used so far (all its threads)."""
        fields = Path(f"/proc/{self.proc.pid}/stat").read_text().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / CLOCK_TICKS

    def cpu_ns(self) -> int:
        """CPU time the worker's live threads have run, in ns (``/proc/PID/task/*/schedstat``):
        finer than ``cpu_seconds``' 10 ms ticks, for short measurements; a thread that has
        ended no longer counts."""
        total = 0
        for tid in os.listdir(f"/proc/{self.proc.pid}/task"):
            try:
                stat = Path(f"/proc/{self.proc.pid}/task/{tid}/schedstat").read_text()
                total += int(stat.split()[0])
            except (FileNotFoundError, ProcessLookupError):
                pass  # a thread that just ended
        return total

    def close(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        self._stderr.close()

    def _tail(self) -> str:
        self._stderr.seek(0)
        text = self._stderr.read()[-2000:]
        return f"; stderr:\n{text}" if text else ""


@contextmanager
def broker(*extra: str) -> Iterator[tuple[str, Worker]]:
    """An ``xrmq bus`` broker process on a fresh ipc bus (``extra``: more of its options):
    yield (bus string, its worker)."""
    directory = tempfile.mkdtemp(prefix="xrmq-bench-")
    os.chmod(directory, 0o700)
    bus = f"ipc://{directory}/bus"
    worker = Worker("broker", "-m", "xrmq.actors.cli", "bus", "--bus", bus, *extra)
    try:
        worker.expect("xrmq bus: ready")
        yield bus, worker
    finally:
        worker.close()
        shutil.rmtree(directory, ignore_errors=True)
