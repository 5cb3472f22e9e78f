"""Validation at the edge: the envelope rules every received message is checked against, once.

What msgspec checks while decoding the metadata frame (types, ``seq`` and ``epoch``
ranges, a non-empty id) is the schema's part; this module adds the rules that relate
fields to each other and to the key, and names a category for each rejection (the
``rejected_by`` counters of ``RuntimeMetrics``, one per category):

- ``frames``: not exactly three frames; ``key``: not ``<topic> NUL <participant> NUL``;
- ``metadata``: the metadata frame does not decode or validate; ``seq``/``epoch``:
  the metadata's ``seq`` or ``epoch`` is out of its range;
- ``participant``: an empty participant id, or one that differs from the key's;
- ``reply_to``: a ``reply_to`` that is not an inbox topic (``_inbox.<runtime>``);
- ``epoch``: an epoch no honest sender can have: later than now plus
  ``epoch_skew_s`` (epochs are start times in microseconds);
- ``payload``: the payload does not decode as the topic's schema.

The checks cost a few comparisons per message: the clock is read only when an epoch
is above the last ceiling computed (the ceiling only grows).
"""

from __future__ import annotations

import time

import msgspec

from xrmq.schemas import MessageMetadata

DECODE_ERRORS = (msgspec.DecodeError, msgspec.ValidationError, RecursionError)
"""What decoding an untrusted frame can raise (deeply nested MessagePack: RecursionError)."""

INBOX_PREFIX = "_inbox."
"""Every reply_to names an inbox topic: ``_inbox.<runtime name>``."""
DEFAULT_EPOCH_SKEW_S = 300.0
"""Clock skew allowed between a sender and this receiver, for the epoch check."""

REJECT_CATEGORIES = (
    "frames",
    "key",
    "metadata",
    "seq",
    "epoch",
    "participant",
    "reply_to",
    "payload",
)


def metadata_category(error: Exception) -> str:
    """The category of a metadata frame that did not decode: ``seq``, ``epoch`` or ``metadata``."""
    text = str(error)
    if text.endswith("`$.seq`"):
        return "seq"
    if text.endswith("`$.epoch`"):
        return "epoch"
    return "metadata"


class EnvelopeCheck:
    """Relates a decoded envelope to its key and to the clock; see the module docstring."""

    __slots__ = ("_ceiling", "skew_us")

    def __init__(self, epoch_skew_s: float = DEFAULT_EPOCH_SKEW_S) -> None:
        if not epoch_skew_s > 0:
            raise ValueError("epoch_skew_s: must be > 0")
        self.skew_us = int(epoch_skew_s * 1e6)
        self._ceiling = time.time_ns() // 1000 + self.skew_us

    def reject(self, pid: bytes, metadata: MessageMetadata) -> str | None:
        """The category of a broken rule (None: the envelope is acceptable)."""
        participant = metadata.participant_id
        if participant is None:
            if pid:
                return "participant"
        elif not participant or participant.encode() != pid:
            return "participant"
        reply_to = metadata.reply_to
        if reply_to is not None and (
            len(reply_to) <= len(INBOX_PREFIX)
            or not reply_to.startswith(INBOX_PREFIX)
            or "\x00" in reply_to
        ):
            return "reply_to"
        if metadata.epoch > self._ceiling:
            self._ceiling = time.time_ns() // 1000 + self.skew_us
            if metadata.epoch > self._ceiling:
                return "epoch"
        return None

    @staticmethod
    def describe(category: str) -> str:
        """The rule a category stands for, for the log line."""
        return _RULES[category]


_RULES = {
    "frames": "a message has exactly 3 frames",
    "key": "key must be <topic> NUL <participant> NUL",
    "metadata": "metadata must decode as MessageMetadata",
    "seq": "metadata.seq must be in [1, 2**53]",
    "epoch": "metadata.epoch must be in [0, now + skew] (microseconds) and below 2**63",
    "participant": "metadata.participant_id must be non-empty and equal the key's participant",
    "reply_to": "metadata.reply_to must be an inbox topic (_inbox.<runtime>)",
    "payload": "payload must decode as the topic's schema",
}
