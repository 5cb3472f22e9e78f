"""Tests that need a system package say so when they skip, and can run without one.

The README's test command must pass on a machine that has nothing but Python: a test that
needs a system package (espeak-ng) skips with the package named and how to install it.
``path_without`` builds a ``PATH`` on which given programs are not found, so that a test
can show what a machine without them sees, on a machine that has them.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

ESPEAK_MISSING = (
    "needs the system package espeak-ng (apt-get install espeak-ng), which is not installed"
)
needs_espeak = pytest.mark.skipif(shutil.which("espeak-ng") is None, reason=ESPEAK_MISSING)
"""Mark a test that runs espeak-ng: without it the test skips, naming the package."""


def path_without(directory: Path, *programs: str, path: str | None = None) -> str:
    """``path`` (default ``$PATH``) with each folder that holds one of ``programs`` replaced
    by a folder under ``directory`` of links to all of its other entries."""
    folders = []
    for index, entry in enumerate((path if path is not None else os.environ["PATH"]).split(":")):
        folder = Path(entry)
        if not entry or not any((folder / program).exists() for program in programs):
            folders.append(entry)
            continue
        copy = directory / f"path-{index}"
        copy.mkdir(parents=True)
        for item in folder.iterdir():
            if item.name not in programs:
                (copy / item.name).symlink_to(item)
        folders.append(str(copy))
    return ":".join(folders)
