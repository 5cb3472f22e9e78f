"""One participant's side of the voice ordering, as pure data and rules.

``ParticipantQueues`` holds what one participant will hear: the response being spoken
(``active``, with the token of the segment out for playing), the responses waiting in
three queues (urgent first, then replies, then updates), the end notices the player has
yet to take (``ResponseEnded``) and the requests seen (superseded or not). It decides
which response plays next (``next_item``: with ``combine``, the queued updates become
one response), which queued response goes first when the queues are full
(``pop_least_valuable``: the oldest update, else reply, else urgent) and what a
producer's withdraw removes (its queued updates, urgent or not). ``Item.release`` hands
out what of a response can be spoken now: complete words, never half a word (or whole
sentences, for a speech synthesizer, which says a sentence best when it has all of it),
and all of it once its stream is closed.

The rules across participants and streams (supersede, cut, stream timeouts, bounds) are
``VoiceOrdering``'s (``ordering``). Like it, nothing here counts, logs, sleeps or
performs I/O.
"""

from __future__ import annotations

import re
from collections import OrderedDict, deque
from dataclasses import dataclass, field
from typing import Literal

EndReason = Literal["completed", "incomplete", "cut", "superseded", "interrupted"]
StreamKey = tuple[str, str, str]
"""A streamed reply: (participant, source, response_id)."""

_LAST_WORD_BREAK = re.compile(r"\s(?=\S*\Z)")
_SENTENCE_END = re.compile(r"(?:(?<=[.!?])|(?<=[.!?][\"')\]]))\s+(?=\S)")
"""White space after a sentence's end: ``.``, ``!`` or ``?``, maybe a closing quote or bracket."""
MAX_UNSPOKEN_CHARS = 200
"""Released a sentence at a time, a stream still speaks at the last word break once this
much text waits without a sentence end (a run-on reply is not held back to its end)."""


def split_sentences(text: str) -> list[str]:
    """``text`` cut after each sentence end; a text without one is one sentence. Empty
    pieces go."""
    return [piece.strip() for piece in _SENTENCE_END.split(text) if piece.strip()]


@dataclass(frozen=True, slots=True)
class ResponseEnded:
    """A response that played at least one segment has ended (completed, cut or dropped)."""

    participant_id: str
    response: int
    kind: Literal["reply", "update"]
    sources: tuple[str, ...]
    reason: EndReason


@dataclass(slots=True, eq=False)
class Item:
    """One response: complete, or a stream still receiving fragments."""

    number: int
    participant_id: str
    kind: Literal["reply", "update"]
    sources: tuple[str, ...]
    request_id: str | None
    timestamp_us: int | None
    pending: str
    urgent: bool = False
    key: StreamKey | None = None
    closed: bool = True
    last_fragment_at: float = 0.0
    started: bool = False
    sender: str = ""
    """The bus sender (runtime) of the stream's fragments."""
    gapped: bool = False
    """A fragment of this stream may have been lost: it cannot end ``completed``."""

    def release(self, sentences: bool = False) -> str:
        """Take the speakable text: all of it once closed, else up to the last word break
        (with ``sentences``: up to the last sentence end, or the last word break once
        ``MAX_UNSPOKEN_CHARS`` wait without one)."""
        if self.closed:
            text, self.pending = self.pending, ""
            return text.strip()
        match = None
        if sentences:
            match = next(reversed(list(_SENTENCE_END.finditer(self.pending))), None)
            if match is None and len(self.pending) < MAX_UNSPOKEN_CHARS:
                return ""
        match = match or _LAST_WORD_BREAK.search(self.pending)
        if match is None:
            return ""
        text, self.pending = self.pending[: match.start()], self.pending[match.end() :]
        return text.strip()


@dataclass(slots=True)
class ParticipantQueues:
    """One participant's responses and requests; see the module docstring."""

    participant_id: str
    active: Item | None = None
    playing: int | None = None
    """Token of the segment out for playing, if any."""
    ahead: int | None = None
    """Token of the next segment handed out to be prepared while ``playing`` plays, if any."""
    urgent: deque[Item] = field(default_factory=deque)
    replies: deque[Item] = field(default_factory=deque)
    updates: deque[Item] = field(default_factory=deque)
    ended: deque[ResponseEnded] = field(default_factory=deque)
    requests: OrderedDict[str, bool] = field(default_factory=OrderedDict)
    """Request ids seen for this participant -> superseded?"""
    gap_from: set[str] = field(default_factory=set)
    """Senders whose next fragment for this participant follows a reported gap."""

    def queued(self) -> int:
        return len(self.urgent) + len(self.replies) + len(self.updates)

    def idle(self) -> bool:
        return self.active is None and self.playing is None and not self.ended and not self.queued()

    def remember_request(self, request_id: str, capacity: int) -> None:
        """Note a request seen (current), keeping the ``capacity`` most recent."""
        if request_id not in self.requests:
            self.requests[request_id] = False
            while len(self.requests) > capacity:
                self.requests.popitem(last=False)

    def next_item(self, combine: bool) -> tuple[Item | None, int]:
        """Dequeue the response to play next (urgent, else reply, else update); with
        ``combine`` every queued update goes into one. Returns it (None: nothing queued)
        and how many updates were combined into another."""
        if self.urgent:
            return self.urgent.popleft(), 0
        if self.replies:
            return self.replies.popleft(), 0
        if not self.updates:
            return None, 0
        parts = list(self.updates) if combine else [self.updates[0]]
        for _ in parts:
            self.updates.popleft()
        if len(parts) == 1:
            return parts[0], 0
        first = parts[0]
        combined = Item(
            first.number,
            first.participant_id,
            "update",
            tuple(dict.fromkeys(source for part in parts for source in part.sources)),
            None,
            min(
                (part.timestamp_us for part in parts if part.timestamp_us is not None), default=None
            ),
            " ".join(part.pending.strip() for part in parts),
        )
        return combined, len(parts) - 1

    def pop_least_valuable(self) -> Item:
        """Dequeue the oldest update, else the oldest reply, else the oldest urgent update."""
        queue = self.updates or self.replies or self.urgent
        return queue.popleft()

    def withdraw(self, source: str) -> int:
        """Remove ``source``'s queued updates (urgent or not); returns how many."""
        removed = 0
        for queue in (self.updates, self.urgent):
            kept = [item for item in queue if item.sources != (source,)]
            removed += len(queue) - len(kept)
            queue.clear()
            queue.extend(kept)
        return removed
