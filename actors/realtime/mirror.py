"""What a standby session holds of the participant's transcript, as a pure core.

A standby session is opened before the rollover's boundary and seeded from the latest
checkpoint while the current session keeps serving; the conversation goes on meanwhile.
For the switch to lose nothing, the standby must hold, at the switch, exactly what a
fresh session would be seeded with then (seed 003's watermark rule): the summary, the
retained tail, and every message completed after the snapshot, in order.

``StandbyMirror`` keeps the messages the standby holds (seeded, then added) and the id
through which it holds the transcript (``through``):

* :meth:`StandbyMirror.seed` takes the completed messages after the checkpoint's summary,
  up to the first incomplete one (a response still streaming, a user turn without its
  transcript): those are the seed's items; later ones come with :meth:`pending`.
* :meth:`pending` returns the messages completed since ``through``, in order, stopping
  at the first incomplete one; the shell adds them (``conversation.item.create``) and
  calls :meth:`added`.
* :meth:`changed` tells whether a message the standby holds was changed or removed since
  (a barge-in truncated it, an aggregation merged it): the standby then holds a past
  that no longer is, and is discarded. A message dropped because a later checkpoint's
  summary covers it is not a change (the standby's older summary plus the message still
  say the same).

Messages with no text are never seeded (as ``Checkpointer.recovered`` skips them) but
count for ``through``. ``held`` grows only until the switch (the mirror goes with its
standby), so by what is said between ``prepare_at`` and the boundary. No I/O, no
lock: the shell calls it under the session's lock.
"""

from __future__ import annotations

from collections.abc import Sequence

from .checkpoint import Checkpointer, Message


def completed_after(messages: Sequence[Message], after: int) -> tuple[list[Message], int]:
    """The messages with text after id ``after`` up to the first incomplete one, and the
    id of the last completed message considered (``after`` if none)."""
    kept: list[Message] = []
    through = after
    for message in messages:
        if message.id <= after:
            continue
        if not message.complete:
            break
        through = message.id
        if message.text.strip():
            kept.append(message)
    return kept, through


class StandbyMirror:
    """See the module docstring."""

    def __init__(self, summary: str | None, held: list[Message], through: int) -> None:
        self.summary = summary
        self.held = held
        self.through = through
        self.seeded = len(held)
        """How many of ``held`` were seed items (the rest were added while it waited)."""

    @classmethod
    def seed(cls, checkpointer: Checkpointer) -> StandbyMirror:
        latest = checkpointer.latest
        summarized = latest.summarized_through if latest is not None else 0
        held, through = completed_after(checkpointer.transcript.messages, summarized)
        return cls(latest.summary if latest is not None else None, held, through)

    def pending(self, messages: Sequence[Message]) -> tuple[list[Message], int]:
        """The messages to add now, in order, and the ``through`` they bring it to."""
        return completed_after(messages, self.through)

    def added(self, messages: list[Message], through: int) -> None:
        self.held.extend(messages)
        self.through = through

    def changed(self, messages: Sequence[Message], summarized_through: int) -> bool:
        """Whether a held message changed or vanished (other than summarized away)."""
        live = {message.id: message for message in messages}
        for held in self.held:
            message = live.get(held.id)
            if message is None:
                if held.id > summarized_through:
                    return True
            elif message.text != held.text:
                return True
        return False
