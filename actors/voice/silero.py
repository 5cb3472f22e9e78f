"""Silero VAD, streaming: the thin shell that gives ``UtteranceSegmenter`` its probabilities.

The ONNX model ships inside faster-whisper (``faster_whisper/assets/silero_vad_v6.onnx``;
the ``voice`` extra). One ``onnxruntime`` session per process is shared by every
participant; each participant's ``SileroStream`` carries the model's recurrent state
(``h``, ``c``) and the last 64 samples of context between 512-sample chunks, as
faster-whisper's batch ``SileroVADModel`` does between its chunks.
"""

from __future__ import annotations

import threading
from typing import Any

import numpy as np

CHUNK_SAMPLES = 512
"""Samples per VAD chunk at 16 kHz (32 ms), the size Silero is trained on."""
_CONTEXT = 64


class VoiceDependencyError(RuntimeError):
    """The ``voice`` extra is not installed (``pip install 'xrmq[voice]'``)."""


class SileroModel:
    """The process's one Silero VAD session (single-threaded inference)."""

    _shared: SileroModel | None = None
    _lock = threading.Lock()

    def __init__(self) -> None:
        try:
            import onnxruntime
            from faster_whisper.utils import get_assets_path
        except ImportError as error:
            raise VoiceDependencyError(
                f"Silero VAD needs the voice extra: pip install 'xrmq[voice]' ({error})"
            ) from None
        import os

        options = onnxruntime.SessionOptions()
        options.inter_op_num_threads = 1
        options.intra_op_num_threads = 1
        options.log_severity_level = 4
        path = os.path.join(get_assets_path(), "silero_vad_v6.onnx")
        self.session: Any = onnxruntime.InferenceSession(
            path, providers=["CPUExecutionProvider"], sess_options=options
        )

    @classmethod
    def shared(cls) -> SileroModel:
        """The process-wide model, loaded on first use."""
        with cls._lock:
            if cls._shared is None:
                cls._shared = cls()
            return cls._shared


class SileroStream:
    """One audio stream's VAD state: ``probability(chunk)`` for consecutive chunks."""

    def __init__(self, model: SileroModel) -> None:
        self._model = model
        self.reset()

    def reset(self) -> None:
        self._h = np.zeros((1, 1, 128), dtype=np.float32)
        self._c = np.zeros((1, 1, 128), dtype=np.float32)
        self._context = np.zeros(_CONTEXT, dtype=np.float32)

    def probability(self, chunk: np.ndarray) -> float:
        """Speech probability of the next ``CHUNK_SAMPLES`` samples (16 kHz float32)."""
        if chunk.size != CHUNK_SAMPLES:
            raise ValueError(f"SileroStream.probability: chunk must be {CHUNK_SAMPLES} samples")
        batch = np.concatenate([self._context, chunk]).reshape(1, -1).astype(np.float32)
        output, self._h, self._c = self._model.session.run(
            None, {"input": batch, "h": self._h, "c": self._c}
        )
        self._context = chunk[-_CONTEXT:].astype(np.float32)
        return float(np.asarray(output).reshape(-1)[0])
