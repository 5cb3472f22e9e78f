"""Where and with what a run happened: machine, interpreter, package versions, git commit."""

from __future__ import annotations

import importlib.metadata
import os
import platform
import subprocess
from pathlib import Path

PACKAGES = (
    "xrmq",
    "pyzmq",
    "msgspec",
    "structlog",
    "litellm",
    "autogen-core",
    "pykka",
    "matplotlib",
)


def cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def git_commit(root: Path) -> str:
    """The commit the benchmarked code is at, with ``-dirty`` if the tree has changes."""
    try:
        commit = subprocess.run(
            ["git", "rev-parse", "HEAD"], cwd=root, capture_output=True, text=True, check=True
        ).stdout.strip()
        dirty = subprocess.run(
            ["git", "status", "--porcelain", "--untracked-files=no"],
            cwd=root,
            capture_output=True,
            text=True,
            check=True,
        ).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return "unknown"
    return commit + ("-dirty" if dirty else "")


def versions() -> dict[str, str]:
    found = {"python": platform.python_version()}
    for name in PACKAGES:
        try:
            found[name] = importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            pass
    try:
        import zmq

        found["libzmq"] = zmq.zmq_version()
    except ImportError:
        pass
    return found


def machine() -> dict[str, object]:
    return {
        "cpu": cpu_model(),
        "cpus_usable": len(os.sched_getaffinity(0)),
        "machine": platform.machine(),
        "system": f"{platform.system()} {platform.release()}",
        "memory_gb": round(os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**30, 1),
    }
