"""Streaming utterance segmentation: a pure core, fed VAD chunks and their speech probability.

``UtteranceSegmenter.push(chunk, probability, timestamp_us)`` takes one VAD chunk (16 kHz
mono float32, typically 512 samples) with the probability a VAD gave it, and returns the
events it caused:

* ``SpeechStarted``: speech has lasted ``min_speech_s``; carries when it began.
* ``Utterance``: the speech ended (``trailing_silence_s`` below the silence threshold,
  the hangover) or reached ``max_utterance_s``; carries its audio with ``pre_roll_s``
  of lead-in, and the times it began and ended.
* ``Discarded``: a burst shorter than ``min_speech_s`` ended (a click, a cough).
* ``Pause``: with ``pause_silence_s`` (> 0, below the hangover), a confirmed burst has been
  silent that long: its audio so far, so the caller can recognize it while the hangover
  runs, and end the turn at once (``finish``) when the words so far end a sentence.

Hysteresis as in Silero's own segmenter: a chunk at or above ``threshold`` is speech,
one below ``threshold - 0.15`` is silence, anything between continues the current state.
Memory is bounded: at most ``max_utterance_s + pre_roll_s`` of audio is held.
No I/O and no clock: the tests drive it with tables of probabilities.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field

import numpy as np

from .pcm import SAMPLE_RATE


@dataclass(frozen=True)
class SegmenterSettings:
    threshold: float = 0.5
    """Speech probability at or above which a chunk is speech."""
    min_speech_s: float = 0.25
    """Voiced time before a burst counts as speech."""
    trailing_silence_s: float = 0.4
    """Silence that ends an utterance (the hangover)."""
    pre_roll_s: float = 0.2
    """Audio kept from before the speech began (the VAD reacts late)."""
    max_utterance_s: float = 15.0
    """An utterance is cut at this length (bounds memory and recognition time)."""
    pause_silence_s: float = 0.0
    """Silence after which a ``Pause`` is reported (0: never); below the hangover."""

    def __post_init__(self) -> None:
        checks = {
            "threshold": 0.15 < self.threshold < 1.0,
            "min_speech_s": self.min_speech_s >= 0,
            "trailing_silence_s": self.trailing_silence_s > 0,
            "pre_roll_s": self.pre_roll_s >= 0,
            "max_utterance_s": self.max_utterance_s > self.min_speech_s,
            "pause_silence_s": 0 <= self.pause_silence_s < self.trailing_silence_s,
        }
        for name, ok in checks.items():
            if not ok:
                rule = "must be in (0.15, 1)" if name == "threshold" else "is out of range"
                if name == "max_utterance_s":
                    rule = "must be > min_speech_s"
                if name == "pause_silence_s":
                    rule = "must be >= 0 and < trailing_silence_s"
                raise ValueError(f"SegmenterSettings.{name}: {rule}")


@dataclass(frozen=True)
class SpeechStarted:
    start_us: int


@dataclass(frozen=True)
class Utterance:
    start_us: int
    """When the speech began (first voiced chunk)."""
    end_us: int
    """When the last voiced chunk ended."""
    audio: np.ndarray = field(repr=False)
    """16 kHz mono float32, from ``pre_roll_s`` before the start to the end of the hangover."""
    cut: bool = False
    """True when ``max_utterance_s`` ended it, not silence."""
    closed_us: int | None = None
    """When it was closed: the end of the chunk that decided it (the chunks' clock), or the
    time ``finish`` was given."""


@dataclass(frozen=True)
class Discarded:
    start_us: int
    voiced_s: float


@dataclass(frozen=True)
class Pause:
    start_us: int
    """When the speech began."""
    end_us: int
    """When the last voiced chunk ended: the utterance's end if no speech follows."""
    audio: np.ndarray = field(repr=False)
    """The burst's audio so far (as ``Utterance.audio``, the pause's silence included)."""
    decided_us: int | None = None
    """The end of the chunk that made the silence a pause (the chunks' clock)."""


SegmentEvent = SpeechStarted | Utterance | Discarded | Pause


class UtteranceSegmenter:
    """One participant's speech segmentation state (see the module docstring)."""

    def __init__(
        self, settings: SegmenterSettings = SegmenterSettings(), sample_rate: int = SAMPLE_RATE
    ) -> None:
        self.settings = settings
        self.sample_rate = sample_rate
        self._pre_roll: deque[np.ndarray] = deque()
        self._pre_roll_samples = 0
        self._chunks: list[np.ndarray] = []
        self._held = 0
        self._in_speech = False
        self._confirmed = False
        self._start_us = 0
        self._end_us = 0
        self._voiced = 0.0
        self._silence = 0.0

    @property
    def in_speech(self) -> bool:
        """A burst is open (confirmed or not)."""
        return self._in_speech

    @property
    def speech_s(self) -> float:
        """Voiced seconds of the open burst (0 outside speech)."""
        return self._voiced if self._in_speech else 0.0

    @property
    def held_samples(self) -> int:
        """Samples buffered (pre-roll and the open utterance): bounded by the settings."""
        return self._pre_roll_samples + self._held

    @property
    def burst_start_us(self) -> int | None:
        """When the open confirmed burst began; None outside one."""
        return self._start_us if self._confirmed else None

    def speech_audio(self) -> np.ndarray:
        """The open burst's audio so far, as its ``Utterance.audio`` will begin."""
        return np.concatenate(self._chunks) if self._chunks else np.zeros(0, np.float32)

    def reset(self) -> None:
        """Forget everything (a participant left, or the stream restarted)."""
        self.__init__(self.settings, self.sample_rate)  # type: ignore[misc]

    def push(self, chunk: np.ndarray, probability: float, timestamp_us: int) -> list[SegmentEvent]:
        settings = self.settings
        seconds = chunk.size / self.sample_rate
        end_us = timestamp_us + round(seconds * 1e6)
        if not self._in_speech:
            if probability < settings.threshold:
                self._remember(chunk)
                return []
            self._in_speech, self._confirmed = True, False
            self._start_us, self._voiced, self._silence = timestamp_us, 0.0, 0.0
            self._chunks, self._held = list(self._pre_roll), self._pre_roll_samples
            self._pre_roll.clear()
            self._pre_roll_samples = 0
        self._chunks.append(chunk)
        self._held += chunk.size
        events: list[SegmentEvent] = []
        if probability >= settings.threshold:
            # A pause shorter than the hangover counts as part of the speech.
            gap = self._silence if self._silence < settings.trailing_silence_s else 0.0
            self._voiced += seconds + gap
            self._silence = 0.0
            self._end_us = end_us
        elif probability < settings.threshold - 0.15:
            self._silence += seconds
        elif self._silence == 0.0:
            self._voiced += seconds
            self._end_us = end_us
        if not self._confirmed and self._voiced >= settings.min_speech_s:
            self._confirmed = True
            events.append(SpeechStarted(self._start_us))
        pause = settings.pause_silence_s
        if self._confirmed and pause > 0 and self._silence >= pause > self._silence - seconds:
            audio = np.concatenate(self._chunks)
            events.append(Pause(self._start_us, self._end_us, audio, decided_us=end_us))
        if self._silence >= settings.trailing_silence_s:
            events.append(self._close(cut=False, closed_us=end_us))
        elif (end_us - self._start_us) / 1e6 >= settings.max_utterance_s:
            events.append(self._close(cut=True, closed_us=end_us))
        return events

    def pausing(self, pause: Pause) -> bool:
        """Whether the burst of ``pause`` is still open and silent since it (no speech came)."""
        return (
            self._confirmed
            and self._silence > 0
            and (self._start_us, self._end_us) == (pause.start_us, pause.end_us)
        )

    def finish(self, closed_us: int | None = None) -> Utterance | None:
        """End the open confirmed burst now (its words end a sentence; ``closed_us``: when
        that was decided); None without one."""
        if not self._confirmed:
            return None
        closed = self._close(cut=False, closed_us=closed_us)
        return closed if isinstance(closed, Utterance) else None

    def _close(self, *, cut: bool, closed_us: int | None) -> SegmentEvent:
        confirmed, start_us, voiced = self._confirmed, self._start_us, self._voiced
        audio = np.concatenate(self._chunks) if confirmed else np.zeros(0, np.float32)
        self._in_speech, self._confirmed = False, False
        self._chunks, self._held, self._voiced, self._silence = [], 0, 0.0, 0.0
        if not confirmed:
            return Discarded(start_us, voiced)
        return Utterance(start_us, self._end_us, audio, cut=cut, closed_us=closed_us)

    def _remember(self, chunk: np.ndarray) -> None:
        self._pre_roll.append(chunk)
        self._pre_roll_samples += chunk.size
        limit = self.settings.pre_roll_s * self.sample_rate
        while self._pre_roll and self._pre_roll_samples - self._pre_roll[0].size >= limit:
            self._pre_roll_samples -= self._pre_roll.popleft().size
