"""Checkpoint without loss, as a pure core.

The summary must never replace the live context directly: messages produced while the
summarizer runs would be lost. So a checkpoint is built from an immutable snapshot:

1. :meth:`Checkpointer.begin` snapshots **completed** messages only (it stops at the
   first incomplete one) and splits them into a head to summarize and a recent tail
   kept verbatim (``keep_tail`` messages).
2. The shell summarizes the head (the compaction workers) while the live transcript
   keeps growing (:meth:`LiveTranscript.append`).
3. :meth:`Checkpointer.commit` accepts the summary only if the snapshotted messages are
   still exactly what the transcript holds (same ids, same text: an interruption
   truncated none, an aggregation merged none). Otherwise the candidate is discarded,
   counted, and ``None`` tells the shell to retry.
4. :meth:`Checkpointer.recovered` is what a new session is seeded with: the summary,
   the retained tail, then every message added after the snapshot::

       Snapshot:          [A B C] [D]
       New messages:              [E F]
       Recovered context: Summary(A B C) + D + E + F

Summaries chain: the next snapshot's head starts after the prefix already summarized
and the previous summary is merged in, so each summary covers the whole past. Messages
covered by a committed summary leave the transcript, so it stays bounded by what has not
been summarized yet.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

Role = Literal["user", "assistant"]


@dataclass(frozen=True, slots=True)
class Message:
    """One transcript message; ``complete`` once its turn ended."""

    id: int
    role: Role
    text: str
    complete: bool = True


class LiveTranscript:
    """The session's messages in order; every change to an existing message is visible."""

    def __init__(self) -> None:
        self._messages: list[Message] = []
        self._next = 1

    @property
    def messages(self) -> tuple[Message, ...]:
        return tuple(self._messages)

    def append(self, role: Role, text: str, *, complete: bool = True) -> int:
        """Add a message; returns its id (increasing)."""
        message = Message(self._next, role, text, complete)
        self._next += 1
        self._messages.append(message)
        return message.id

    def replace(self, message_id: int, text: str, *, complete: bool = True) -> None:
        """Change a message's text (a streamed answer grows; an interruption truncates it)."""
        index = self._index(message_id)
        old = self._messages[index]
        self._messages[index] = Message(old.id, old.role, text, complete)

    def merge(self, first_id: int, second_id: int) -> None:
        """Aggregate ``second_id`` into ``first_id`` (e.g. two user fragments into one turn)."""
        first, second = self._index(first_id), self._index(second_id)
        kept = self._messages[first]
        joined = f"{kept.text} {self._messages[second].text}".strip()
        self._messages[first] = Message(
            kept.id, kept.role, joined, kept.complete and self._messages[second].complete
        )
        del self._messages[second]

    def drop_through(self, message_id: int) -> None:
        """Forget every message up to ``message_id`` (a committed summary covers them)."""
        self._messages = [message for message in self._messages if message.id > message_id]

    def _index(self, message_id: int) -> int:
        for index, message in enumerate(self._messages):
            if message.id == message_id:
                return index
        raise KeyError(f"LiveTranscript: no message {message_id}")


def heard_part(text: str, audio_end_ms: float, audio_ms: float) -> str:
    """What the participant heard of an answer cut at ``audio_end_ms`` of its ``audio_ms``
    of speech: its words in proportion (the transcript keeps only what was heard, as the
    Realtime protocol's ``conversation.item.truncate`` asks)."""
    if audio_ms <= 0 or audio_end_ms >= audio_ms:
        return text
    words = text.split()
    return " ".join(words[: int(len(words) * max(0.0, audio_end_ms) / audio_ms)])


@dataclass(frozen=True, slots=True)
class Snapshot:
    """An immutable candidate: ``head`` to summarize, ``tail`` kept verbatim."""

    head: tuple[Message, ...]
    tail: tuple[Message, ...]
    previous_summary: str | None

    @property
    def watermark(self) -> int:
        """Id of the last snapshotted message (0: none)."""
        last = (self.head + self.tail)[-1:] or ()
        return last[0].id if last else 0


@dataclass(frozen=True, slots=True)
class Checkpoint:
    """A committed checkpoint: the summary of everything through ``summarized_through``
    and the verbatim tail that followed it in the snapshot."""

    summary: str | None
    tail: tuple[Message, ...]
    watermark: int
    summarized_through: int


@dataclass(frozen=True, slots=True)
class Recovered:
    """What a new session is seeded with: summary, then these messages in order."""

    summary: str | None
    messages: tuple[Message, ...]


class Checkpointer:
    """Snapshots, commits and recovery over one participant's :class:`LiveTranscript`."""

    def __init__(self, transcript: LiveTranscript, *, keep_tail: int = 4) -> None:
        if keep_tail < 0:
            raise ValueError("Checkpointer.keep_tail: must be >= 0")
        self.transcript = transcript
        self.keep_tail = keep_tail
        self.latest: Checkpoint | None = None
        self.discarded = 0
        self.committed = 0

    def begin(self) -> Snapshot:
        """Snapshot the completed prefix (never an incomplete message or what follows it)."""
        completed: list[Message] = []
        for message in self.transcript.messages:
            if not message.complete:
                break
            completed.append(message)
        split = max(0, len(completed) - self.keep_tail)
        previous = self.latest.summary if self.latest is not None else None
        return Snapshot(tuple(completed[:split]), tuple(completed[split:]), previous)

    def commit(self, snapshot: Snapshot, summary: str | None) -> Checkpoint | None:
        """Accept ``summary`` of ``snapshot.head`` if the snapshot still holds; else ``None``.

        ``summary`` is ignored (the previous summary stays) when the head was empty; an
        empty ``summary`` of a non-empty head (a failed summary) commits nothing.
        """
        current = {message.id: message for message in self.transcript.messages}
        for message in snapshot.head + snapshot.tail:
            if current.get(message.id) != message:
                self.discarded += 1
                return None
        if self.latest is not None and snapshot.watermark < self.latest.watermark:
            self.discarded += 1
            return None
        if snapshot.head:
            if not summary:
                return None  # the summary failed: nothing committed, the shell retries
            through, text = snapshot.head[-1].id, summary
            text_or_none: str | None = text
        else:
            through = self.latest.summarized_through if self.latest is not None else 0
            text_or_none = snapshot.previous_summary
        checkpoint = Checkpoint(text_or_none, snapshot.tail, snapshot.watermark, through)
        self.latest = checkpoint
        self.committed += 1
        if snapshot.head:
            self.transcript.drop_through(through)
        return checkpoint

    def recovered(self) -> Recovered:
        """Summary + retained snapshot tail + everything added after the snapshot.

        The tail and later messages are read from the live transcript, so a message that
        grew after the snapshot (it was incomplete then) is seeded as it is now.
        """
        latest = self.latest
        through = latest.summarized_through if latest is not None else 0
        kept = tuple(
            message
            for message in self.transcript.messages
            if message.id > through and message.text.strip()
        )
        return Recovered(latest.summary if latest is not None else None, kept)
