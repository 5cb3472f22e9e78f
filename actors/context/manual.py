"""Outcomes of a manual compaction (``/compact``, docs/tools.md): ``ContextManager.compact``.

A manual compaction compacts every eligible entry of a section now, whatever the
half-budget trigger says (``Section.start_run``), and reports how it ended: the
entries were replaced by the rolling summary, there was nothing to compact, or the
model failed and the entries stayed (docs/tools.md's NOTHING_TO_CONDENSE and
SUMMARIZE_FAILED, the conversation left untouched).

With the summary guards on, a user who asks to compact now is not told SUMMARIZE_FAILED
because a weak model's summary was refused: the section goes down its failure ladder at
once (a smaller batch, then the extractive summariser), and the outcome says what made
the summary (``made_by``), so the user knows when the model's summaries were not used.
"""

from __future__ import annotations

import enum
from typing import Literal

import msgspec

SummaryMaker = Literal["model", "extractive"]

MAKERS: tuple[SummaryMaker, ...] = ("model", "extractive")

_MADE_BY = {
    ("model",): "by the model",
    ("extractive",): "by the extractive fallback (the model's summaries failed or were refused)",
    ("model", "extractive"): "by the model and the extractive fallback (some of the model's "
    "summaries failed or were refused)",
}


class CompactStatus(enum.Enum):
    COMPACTED = "compacted"
    NOTHING_TO_CONDENSE = "NOTHING_TO_CONDENSE"
    SUMMARIZE_FAILED = "SUMMARIZE_FAILED"


class SectionOutcome(msgspec.Struct, frozen=True):
    section: str
    status: CompactStatus
    detail: str = ""
    """Why it failed (the model's error), or empty."""
    made_by: tuple[SummaryMaker, ...] = ()
    """COMPACTED: what wrote the summaries that took the entries, in ``MAKERS`` order (the
    model, the extractive fallback, or both); empty otherwise."""


class CompactOutcome(msgspec.Struct, frozen=True):
    """What ``compact()`` did, per section, and overall (``status``)."""

    participant_id: str
    sections: tuple[SectionOutcome, ...]

    @property
    def status(self) -> CompactStatus:
        """SUMMARIZE_FAILED if any section failed, else COMPACTED if any compacted, else
        NOTHING_TO_CONDENSE."""
        statuses = {outcome.status for outcome in self.sections}
        for status in (CompactStatus.SUMMARIZE_FAILED, CompactStatus.COMPACTED):
            if status in statuses:
                return status
        return CompactStatus.NOTHING_TO_CONDENSE

    def message(self) -> str:
        """One line per section, for the CLI and ``/compact``."""
        lines = []
        for outcome in self.sections:
            text = {
                CompactStatus.COMPACTED: "compacted into its summary",
                CompactStatus.NOTHING_TO_CONDENSE: "nothing to compact (NOTHING_TO_CONDENSE)",
                CompactStatus.SUMMARIZE_FAILED: "failed, entries kept (SUMMARIZE_FAILED)",
            }[outcome.status]
            made = _MADE_BY.get(outcome.made_by)
            if made is not None:
                text = f"{text} {made}"
            lines.append(
                f"{outcome.section}: {text}" + (f": {outcome.detail}" if outcome.detail else "")
            )
        return "\n".join(lines)
