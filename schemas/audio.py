"""Audio on the bus: microphone frames in, synthesized speech out, playback state.

Wire types only. The participant travels in the envelope, as for every message.
A client in any language sends ``AudioFrame`` maps on ``audio.in`` (PCM16 little-endian,
20 ms per frame by default) and plays the ``AudioFrame`` maps it receives on ``audio.out``.
"""

from __future__ import annotations

from typing import Literal

import msgspec

from ._validation import require

MAX_FRAME_SECONDS = 1.0
"""The longest frame accepted: bounds what one message can make a receiver buffer."""


class AudioFrame(msgspec.Struct, frozen=True):
    """One frame of interleaved PCM16 little-endian audio.

    ``frame`` counts the frames of one stream (0, 1, 2, ...), so a receiver sees a
    missing frame; ``timestamp_us`` is the Unix time of the frame's first sample.
    """

    pcm: bytes
    """Samples as signed 16-bit little-endian integers, channels interleaved."""
    sample_rate: int
    """Samples per second per channel (8000-48000)."""
    channels: int
    """Interleaved channels (1 or 2)."""
    frame: int
    """This frame's number in its stream, from 0."""
    timestamp_us: int
    """Unix microseconds of the first sample."""

    def __post_init__(self) -> None:
        rate, channels, size = self.sample_rate, self.channels, len(self.pcm)
        if (
            8000 <= rate <= 48000
            and channels in (1, 2)
            and self.frame >= 0
            and (
                self.timestamp_us >= 0
                and size % (2 * channels) == 0
                and size <= MAX_FRAME_SECONDS * rate * 2 * channels
            )
        ):
            return
        name = "AudioFrame"
        require(8000 <= rate <= 48000, name, "sample_rate", "must be in [8000, 48000]")
        require(channels in (1, 2), name, "channels", "must be 1 or 2")
        require(self.frame >= 0, name, "frame", "must be >= 0")
        require(self.timestamp_us >= 0, name, "timestamp_us", "must be >= 0")
        require(
            size % (2 * channels) == 0,
            name,
            "pcm",
            "must hold whole 16-bit samples for every channel",
        )
        require(False, name, "pcm", f"must be at most {MAX_FRAME_SECONDS:g} s of audio")

    @property
    def samples(self) -> int:
        """Samples per channel in this frame."""
        return len(self.pcm) // (2 * self.channels)

    @property
    def duration_s(self) -> float:
        return self.samples / self.sample_rate


PlaybackState = Literal["started", "done"]


class AudioPlayback(msgspec.Struct, frozen=True):
    """A participant's assistant audio started or finished playing.

    The speaker side (the audio sink that paces ``audio.out``, or a client that plays
    it) publishes ``started`` before the first frame of a spoken segment and ``done``
    when no assistant audio is playing any more (the segment ended or was cut).
    """

    state: PlaybackState
    timestamp_us: int
    """Unix microseconds of the change."""

    def __post_init__(self) -> None:
        require(self.timestamp_us >= 0, "AudioPlayback", "timestamp_us", "must be >= 0")
