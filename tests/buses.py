"""Test support: a real broker process and helpers to start and reap OS processes."""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

PROCS = Path(__file__).parent / "procs"


def python(script: str, *args: str, **kwargs) -> subprocess.Popen:
    """Start ``tests/procs/<script>`` in a new Python process with piped text output."""
    return subprocess.Popen(
        [sys.executable, str(PROCS / script), *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        **kwargs,
    )


def expect_line(proc: subprocess.Popen, prefix: str) -> str:
    """Read stdout lines until one starts with ``prefix`` (the process's readiness handshake)."""
    assert proc.stdout is not None  # started with stdout a pipe
    for line in proc.stdout:
        if line.startswith(prefix):
            return line.strip()
    stderr = proc.stderr.read()[-3000:] if proc.stderr is not None else "(not captured)"
    raise AssertionError(f"process exited without printing {prefix!r}: {stderr}")


def reap(*procs: subprocess.Popen) -> None:
    """Terminate processes that are still running and wait for all of them."""
    for proc in procs:
        if proc.poll() is None:
            proc.terminate()
    for proc in procs:
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


@contextmanager
def broker_process(*extra: str) -> Iterator[str]:
    """Run ``xrmq bus`` on a fresh ipc bus in a separate process; yield the bus string."""
    directory = tempfile.mkdtemp(prefix="xrmq-")
    bus = f"ipc://{directory}/bus"
    proc = subprocess.Popen(
        [sys.executable, "-m", "xrmq.actors.cli", "bus", "--bus", bus, *extra],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, "XRMQ_LOG_LEVEL": "WARNING"},
    )
    try:
        expect_line(proc, "xrmq bus: ready")
        yield bus
    finally:
        reap(proc)
        shutil.rmtree(directory, ignore_errors=True)


def processes_mentioning(text: str) -> list[int]:
    """Live processes (zombies included) whose command line mentions ``text``: the orphan check."""
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit() and int(entry.name) != os.getpid():
            try:
                if text in (entry / "cmdline").read_bytes().decode(errors="replace"):
                    found.append(int(entry.name))
            except OSError:
                pass
    return found


async def top_once_json(bus: str, *, expect: int = 1, window_s: float = 20) -> list[dict]:
    """``xrmq top --once --json`` on ``bus`` as a real process, awaited without blocking the
    test's loop (the runtimes it reports on run there): its rows, once ``expect`` runtimes
    have reported (at most ``window_s``)."""
    top = await asyncio.create_subprocess_exec(
        sys.executable,
        *("-m", "xrmq.actors.cli", "top", "--bus", bus, "--once", "--json"),
        *("--expect", str(expect), "--window", f"{window_s:g}"),
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    output, errors = await top.communicate()
    assert top.returncode == 0, errors.decode()
    return json.loads(output)
