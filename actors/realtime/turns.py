"""What a realtime session's turns put into its transcript, as a pure core.

``TurnRecorder`` turns the provider's events into ``LiveTranscript`` messages: a user
turn is an incomplete message from its commit until its transcript (or the response's
end) completes it; a response is an incomplete assistant message that grows with its
transcript deltas until ``response.done`` completes it. The transcript is what the next
checkpoint summarizes and what a new session is seeded with, so a barge-in must leave
in it only what the participant heard: ``cut`` finds the response (in progress, or one of
the latest completed ones) and how much of its audio was played, ``heard`` keeps only
the words heard (``heard_part``), now or when the response ends.

No I/O and no lock: the session calls it under its lock, in event order.
"""

from __future__ import annotations

import contextlib
from collections import Counter, deque
from dataclasses import dataclass

from .checkpoint import LiveTranscript, heard_part
from .provider import ResponseDone

SPOKEN_KEPT = 8
"""Completed responses a barge-in may still cut (it may come after the last event)."""


@dataclass(frozen=True, slots=True)
class Spoken:
    """A completed response a barge-in may still cut."""

    response_id: str
    message: int
    text: str
    item_id: str | None
    audio_ms: float
    epoch: int


@dataclass(frozen=True, slots=True)
class Cut:
    """Where a barge-in cut response ``response_id``: ``end_ms`` of its audio heard."""

    response_id: str
    item_id: str | None
    """The assistant item the provider is told to truncate (None: none known)."""
    end_ms: int
    audio_ms: float
    spoken: Spoken | None
    """The completed response cut; None while it is still in progress."""

    def current(self, epoch: int) -> bool:
        """Whether the provider session of ``epoch`` holds the item (not a closed one)."""
        return self.spoken is None or self.spoken.epoch == epoch


class TurnRecorder:
    """The transcript of one participant's turns; see the module docstring."""

    def __init__(self, transcript: LiveTranscript, *, sample_rate: int) -> None:
        self.transcript = transcript
        self.sample_rate = sample_rate
        self._user_message: int | None = None
        self._user_text = ""
        self._assistant: dict[str, int] = {}
        self._assistant_text: dict[str, str] = {}
        self._items: dict[str, str] = {}
        """Each response's assistant item id (what a truncate names)."""
        self._audio_bytes: Counter[str] = Counter()
        """Each response's audio received, in bytes."""
        self._heard: dict[str, int] = {}
        """Responses cut by a barge-in: the milliseconds heard."""
        self._finished: deque[Spoken] = deque(maxlen=SPOKEN_KEPT)

    def text_sent(self, text: str) -> None:
        """A text turn was sent: a complete user message."""
        self._user_message = self.transcript.append("user", text)
        self._user_text = text

    def user_committed(self) -> None:
        """The user's audio turn was committed: its message waits for the transcript."""
        self._user_message = self.transcript.append("user", "", complete=False)
        self._user_text = ""

    def user_transcript(self, text: str) -> None:
        if self._user_message is not None:
            self.transcript.replace(self._user_message, text)
        self._user_text = text

    def response_started(self, response_id: str) -> None:
        self._assistant[response_id] = self.transcript.append("assistant", "", complete=False)
        self._assistant_text[response_id] = ""

    def output_item(self, response_id: str, item_id: str) -> None:
        self._items[response_id] = item_id

    def audio(self, response_id: str, size: int) -> None:
        self._audio_bytes[response_id] += size

    def delta(self, response_id: str, text: str) -> None:
        text = self._assistant_text.get(response_id, "") + text
        self._assistant_text[response_id] = text
        message = self._assistant.get(response_id)
        if message is not None:
            self.transcript.replace(message, text, complete=False)

    def response_done(self, event: ResponseDone, epoch: int) -> str | None:
        """Complete the response's message (only what was heard, if it was cut) and the
        user turn it answered; returns the user's text, or None for a second
        ``response.done`` of one response (or one never started)."""
        if event.response_id not in self._assistant:
            return None
        message = self._assistant.pop(event.response_id, None)
        self._assistant_text.pop(event.response_id, None)
        text = event.text
        heard = self._heard.pop(event.response_id, None)
        if heard is not None:  # cut by a barge-in: only what was heard
            text = heard_part(text, heard, self._audio_ms(event.response_id))
        audio_ms = self._audio_ms(event.response_id)
        self._audio_bytes.pop(event.response_id, None)
        item_id = self._items.pop(event.response_id, None)
        if message is not None:
            # nothing said: an empty, complete message
            self.transcript.replace(message, text if text.strip() else "")
            self._finished.append(
                Spoken(event.response_id, message, event.text, item_id, audio_ms, epoch)
            )
        if self._user_message is not None and not self._user_text:
            self.transcript.replace(self._user_message, "")
        user_text, self._user_text, self._user_message = self._user_text, "", None
        return user_text

    def cut(self, response_id: str, audio_end_ms: int) -> Cut:
        """Where a barge-in that heard ``audio_end_ms`` of ``response_id`` cuts it."""
        spoken = next((s for s in self._finished if s.response_id == response_id), None)
        if spoken is None:
            audio_ms, item_id = self._audio_ms(response_id), self._items.get(response_id)
        else:
            audio_ms, item_id = spoken.audio_ms, spoken.item_id
        end = max(0, min(int(audio_end_ms), int(audio_ms)))
        return Cut(response_id, item_id, end, audio_ms, spoken)

    def heard(self, cut: Cut) -> None:
        """Keep only what was heard of the cut response: now if it ended, else at its end
        (a response neither in progress nor among the latest finished is ignored)."""
        if cut.spoken is None:
            if cut.response_id in self._assistant:
                self._heard[cut.response_id] = cut.end_ms
        else:
            with contextlib.suppress(KeyError):  # already summarized away
                self.transcript.replace(
                    cut.spoken.message, heard_part(cut.spoken.text, cut.end_ms, cut.audio_ms)
                )

    def new_session(self) -> None:
        """A new provider session: the responses in progress will never end."""
        self._assistant.clear()
        self._assistant_text.clear()

    def forget(self, transcript: LiveTranscript) -> None:
        """Record into ``transcript`` from now on, dropping the turns in progress and the
        finished responses a barge-in could still cut (their message ids name messages of
        the old transcript; the new one's ids start again at 1)."""
        self.transcript = transcript
        self._user_message, self._user_text = None, ""
        self._assistant.clear()
        self._assistant_text.clear()
        self._heard.clear()
        self._finished.clear()
        self._items.clear()
        self._audio_bytes.clear()

    def _audio_ms(self, response_id: str) -> float:
        return self._audio_bytes[response_id] / 2 / self.sample_rate * 1000
