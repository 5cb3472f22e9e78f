"""PCM16 audio helpers: conversion, resampling, WAV files, framing. Pure, numpy only.

The voice front end works on 16 kHz mono float32 (what Silero VAD and Whisper take);
the bus carries PCM16 little-endian (``AudioFrame``).
"""

from __future__ import annotations

import io
import wave
from collections.abc import Iterator
from pathlib import Path

import numpy as np

SAMPLE_RATE = 16000
"""The rate the voice front end works at."""
FRAME_MS = 20
"""Default frame length on ``audio.in`` and ``audio.out``."""


def pcm16_to_float(pcm: bytes, channels: int = 1) -> np.ndarray:
    """Interleaved PCM16 LE bytes -> mono float32 in [-1, 1] (channels averaged)."""
    samples = np.frombuffer(pcm, dtype="<i2").astype(np.float32) / 32768.0
    if channels > 1:
        samples = samples.reshape(-1, channels).mean(axis=1)
    return samples


def float_to_pcm16(samples: np.ndarray) -> bytes:
    """Mono float32 in [-1, 1] -> PCM16 LE bytes (clipped)."""
    return (np.clip(samples, -1.0, 1.0) * 32767.0).astype("<i2").tobytes()


def resample(samples: np.ndarray, rate: int, target: int = SAMPLE_RATE) -> np.ndarray:
    """Band-limited (FFT) resampling of one block: no aliasing, which speech recognition needs.

    Linear interpolation from espeak-ng's 22050 Hz turned "spare key" into "packie".
    """
    if rate == target or samples.size == 0:
        return samples.astype(np.float32, copy=False)
    count = max(1, round(samples.size * target / rate))
    spectrum = np.fft.rfft(samples.astype(np.float64))
    kept = np.zeros(count // 2 + 1, dtype=complex)
    width = min(kept.size, spectrum.size)
    kept[:width] = spectrum[:width]
    return (np.fft.irfft(kept, count) * (count / samples.size)).astype(np.float32)


def read_wav(source: str | Path | bytes) -> tuple[np.ndarray, int]:
    """A PCM16 WAV (path or bytes) as mono float32 samples and its sample rate."""
    handle = io.BytesIO(source) if isinstance(source, bytes) else open(source, "rb")
    with handle, wave.open(handle, "rb") as reader:
        if reader.getsampwidth() != 2:
            bits = 8 * reader.getsampwidth()
            raise ValueError(f"read_wav: sample width must be 16 bits, got {bits}")
        data = reader.readframes(reader.getnframes())
        return pcm16_to_float(data, reader.getnchannels()), reader.getframerate()


def wav_bytes(samples: np.ndarray, rate: int = SAMPLE_RATE) -> bytes:
    """Mono float32 samples as the bytes of a PCM16 WAV file."""
    buffer = io.BytesIO()
    with wave.open(buffer, "wb") as writer:
        writer.setnchannels(1)
        writer.setsampwidth(2)
        writer.setframerate(rate)
        writer.writeframes(float_to_pcm16(samples))
    return buffer.getvalue()


def frames(pcm: bytes, rate: int = SAMPLE_RATE, frame_ms: int = FRAME_MS) -> Iterator[bytes]:
    """Mono PCM16 bytes cut into ``frame_ms`` frames; the last is zero-padded."""
    size = rate * frame_ms // 1000 * 2
    for start in range(0, len(pcm), size):
        chunk = pcm[start : start + size]
        yield chunk + b"\0" * (size - len(chunk))
