"""The barge-in voice gate: which speech during the assistant's playback interrupts it. Pure.

Listeners say "yeah", "ok", "mm-hm" while someone talks; that is not a request to stop.
Speech that overlaps the participant's playback interrupts only once it has lasted
``min_speech_s`` (voiced time) and, when ``min_words`` > 0, once its transcript has that
many words. Overlapping speech that never passes the gate is a backchannel: it neither
interrupts nor becomes a query (a query would supersede the answer being played).
Speech outside playback is always a query.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

Verdict = Literal["query", "interrupt", "backchannel"]
"""What to do with a finished utterance: publish it as a query; publish ``Interrupted``
then the query; or drop it."""


@dataclass(frozen=True)
class GateSettings:
    min_speech_s: float = 0.6
    """Voiced time over playback before the speech interrupts."""
    min_words: int = 0
    """Words the transcript must have as well (0: duration alone, decided while speaking)."""

    def __post_init__(self) -> None:
        if not self.min_speech_s >= 0:
            raise ValueError("GateSettings.min_speech_s: must be >= 0")
        if self.min_words < 0:
            raise ValueError("GateSettings.min_words: must be >= 0")


class BargeInGate:
    """One participant's gate: fed playback changes, speech progress and finished utterances."""

    def __init__(self, settings: GateSettings = GateSettings()) -> None:
        self.settings = settings
        self.playing = False
        self._overlap = False
        self._fired = False

    def playback(self, playing: bool) -> None:
        self.playing = playing

    def voiced(self, speech_s: float) -> bool:
        """The open burst has ``speech_s`` voiced seconds; True once when it interrupts now."""
        self._overlap = self._overlap or self.playing
        if (
            self._overlap
            and not self._fired
            and self.settings.min_words == 0
            and (speech_s >= self.settings.min_speech_s)
        ):
            self._fired = True
            return True
        return False

    def finished(self, speech_s: float, words: int) -> Verdict:
        """The burst ended with ``words`` recognized words; resets for the next one."""
        overlap, fired = self._overlap or self.playing, self._fired
        self._overlap = self._fired = False
        if not overlap or fired:
            return "query"
        if (
            self.settings.min_words
            and speech_s >= self.settings.min_speech_s
            and (words >= self.settings.min_words)
        ):
            return "interrupt"
        return "backchannel"
