"""Test support for the voice front end: espeak-ng sentences, a shared recognizer."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from system_packages import ESPEAK_MISSING

if TYPE_CHECKING:
    import numpy as np
else:
    np = pytest.importorskip("numpy")
pytest.importorskip("faster_whisper", reason="the voice extra is not installed")
if shutil.which("espeak-ng") is None:
    pytest.skip(ESPEAK_MISSING, allow_module_level=True)

from xrmq.actors.voice.pcm import read_wav, resample
from xrmq.actors.voice.stt import WhisperSTT

_STT: WhisperSTT | None = None


def shared_stt() -> WhisperSTT:
    """One loaded tiny.en model for the whole test session (loading takes seconds)."""
    global _STT
    if _STT is None:
        _STT = WhisperSTT()
        _STT.load()
    return _STT


def speak(directory: Path, name: str, text: str, *, wpm: int = 165) -> Path:
    """``text`` spoken by espeak-ng into ``directory/name.wav`` (22050 Hz mono)."""
    target = directory / f"{name}.wav"
    subprocess.run(["espeak-ng", "-s", str(wpm), "-w", str(target), text], check=True)
    return target


def spoken(directory: Path, name: str, text: str) -> np.ndarray:
    """``text`` spoken by espeak-ng, as 16 kHz float32 samples."""
    samples, rate = read_wav(speak(directory, name, text))
    return resample(samples, rate)
