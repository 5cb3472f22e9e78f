"""``RecognizerTurns``: the participants of one voice process share its recognizer fairly.

Recognition is CPU-bound and a process runs one at a time (the box has few cores). When
several participants speak at once, each participant's ``VoiceInput`` asks for a turn
(``async with turns.turn(participant)``) before it transcribes its next utterance. Turns
are granted in the order they were asked for, and a participant asks for its next turn
only once its previous one ended (its utterances wait in its own bounded queue, in
``VoiceInput``): so the participants are served round-robin, and no one waits behind
another participant for more than one utterance, however many that one has queued. (A
``threading.Lock`` in the recognizer alone would serve them in no particular order, and
each waiting participant would hold a worker thread of the event loop's pool.)

It is an actor without subscriptions so that the process reports the recognizer's queue
in its metrics (``gauges``, which ``xrmq top`` shows): participants waiting for a turn,
whether one is recognizing, turns granted, and the last turn's wait in milliseconds.
"""

from __future__ import annotations

import asyncio
import time
from collections import deque
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager

from xrmq.actors.runtime import Agent


class RecognizerTurns(Agent):
    """One recognition at a time, participants served in the order they asked."""

    def __init__(self, *, clock: Callable[[], float] = time.monotonic) -> None:
        self._clock = clock
        self._waiting: deque[tuple[str, asyncio.Future[None]]] = deque()
        self.holder: str | None = None
        """The participant recognizing now, if any."""
        self.granted = 0
        self.last_wait_s = 0.0

    @property
    def waiting(self) -> list[str]:
        """The participants waiting for a turn, first served first."""
        return [participant for participant, future in self._waiting if not future.done()]

    @asynccontextmanager
    async def turn(self, participant: str) -> AsyncIterator[None]:
        """Hold the recognizer for ``participant`` for the body of the ``async with``."""
        asked = self._clock()
        if self.holder is not None or self._waiting:
            granted: asyncio.Future[None] = asyncio.get_running_loop().create_future()
            self._waiting.append((participant, granted))
            try:
                await granted
            except asyncio.CancelledError:
                if granted.done() and not granted.cancelled():
                    self._next()  # granted, then cancelled before it ran: pass it on
                else:
                    self._forget(granted)
                raise
        else:
            self.holder = participant
        self.granted += 1
        self.last_wait_s = self._clock() - asked
        try:
            yield
        finally:
            self._next()

    def _forget(self, granted: asyncio.Future[None]) -> None:
        self._waiting = deque(entry for entry in self._waiting if entry[1] is not granted)

    def _next(self) -> None:
        """Hand the recognizer to the first participant still waiting, else free it."""
        while self._waiting:
            participant, granted = self._waiting.popleft()
            if not granted.done():
                self.holder = participant
                granted.set_result(None)
                return
        self.holder = None

    def gauges(self) -> dict[str, float]:
        return {
            "voice.recognizer_waiting": float(len(self.waiting)),
            "voice.recognizer_busy": float(self.holder is not None),
            "voice.recognitions": float(self.granted),
            "voice.recognizer_wait_ms_last": round(self.last_wait_s * 1000.0, 1),
        }
