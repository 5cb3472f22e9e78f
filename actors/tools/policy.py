"""``AutoCompactor``: docs/tools.md's policy chaining the tiers, checked before each model call.

Pure apart from the injected ``summarize`` coroutine (the compaction workers, or a
model directly): given the same transcript and summaries it always does the same.

Trigger: the last response's ``usage.total_tokens`` above ``token_threshold``; when
no usage was reported, the transcript's rendered UTF-8 bytes above ``byte_budget``.
A round reclaims old tool results (tier 1); it is done when fewer than
``escalation_rounds`` tier-1 rounds ran in a row and the estimate after reclaiming is
at most ``threshold * ESCALATION_RATIO``; otherwise it escalates to a summary (tier 2)
in the same round. Still over after a summary, up to ``max_retries`` further rounds
run, each halving both keep values. The token count is cleared after a compaction, so
the stale count of the response before it does not fire again at once.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field

from xrmq.actors.models import ChatMessage

from .tiers import (
    SUMMARY_KEEP_MAX,
    TOOLCALL_KEEP_MAX,
    SummaryCompactResult,
    SummaryStatus,
    ToolCallCompactResult,
)
from .transcript import Transcript

ESCALATION_RATIO = 0.95
"""An estimate must fall to 95 % of the threshold to count as progress (docs/tools.md: a
module constant, not a per-compactor setting)."""

TOKEN_THRESHOLD = 192_000
"""docs/tools.md's default ``auto_compact.token_threshold``."""

BYTES_PER_TOKEN = 4
"""The default byte budget's bytes per token of the threshold (English text runs about 4)."""

Summarize = Callable[[tuple[ChatMessage, ...], str | None], Awaitable[str | None]]
"""``summarize(head, previous_summary)`` returns the new summary, or ``None`` on failure."""


@dataclass(frozen=True, slots=True)
class AutoCompactReport:
    """What one automatic compaction did.

    ``outcome`` is ``COMPACTED`` when the round ended with tier 1 sufficing or a
    summary applied, else the tier-2 status that stopped it (``NOTHING_TO_CONDENSE``,
    ``SUMMARIZE_FAILED``: tier 2 left the transcript as tier 1 left it).
    ``still_over`` is set when the retries ran out above the threshold ("no further
    progress possible").
    """

    outcome: SummaryStatus
    steps: tuple[ToolCallCompactResult | SummaryCompactResult, ...]
    estimate: float
    limit: float
    still_over: bool = False


@dataclass
class AutoCompactor:
    """docs/tools.md's ``AutoCompactor``: every parameter with the seed's default."""

    toolcall_keep_max: int = TOOLCALL_KEEP_MAX
    summary_keep_max: int = SUMMARY_KEEP_MAX
    escalation_rounds: int = 2
    max_retries: int = 2
    token_threshold: int = TOKEN_THRESHOLD
    enabled: bool = True
    byte_budget: int | None = None
    """The transcript's rendered-bytes limit, used when the model reports no usage;
    ``None``: ``BYTES_PER_TOKEN`` bytes per token of ``token_threshold``."""
    reports: list[AutoCompactReport] = field(default_factory=list, repr=False)
    """The most recent reports (at most 16), newest last."""

    def __post_init__(self) -> None:
        for name in ("toolcall_keep_max", "summary_keep_max", "escalation_rounds", "max_retries"):
            if getattr(self, name) < 0:
                raise ValueError(f"AutoCompactor.{name}: must be >= 0")
        if self.token_threshold <= 0:
            raise ValueError("AutoCompactor.token_threshold: must be positive")
        if self.byte_budget is not None and self.byte_budget <= 0:
            raise ValueError("AutoCompactor.byte_budget: must be positive")

    def pressure(self, transcript: Transcript) -> tuple[float, float]:
        """(measure, limit): tokens against the threshold, else bytes against the budget."""
        if transcript.total_tokens is not None:
            return float(transcript.total_tokens), float(self.token_threshold)
        budget = (
            self.token_threshold * BYTES_PER_TOKEN if self.byte_budget is None else self.byte_budget
        )
        return float(transcript.rendered_bytes()), float(budget)

    def due(self, transcript: Transcript) -> bool:
        """Whether the transcript is over its limit now."""
        if not self.enabled:
            return False
        measure, limit = self.pressure(transcript)
        return measure > limit

    async def auto_compact(
        self, transcript: Transcript, summarize: Summarize
    ) -> AutoCompactReport | None:
        """Compact when due; ``None`` when not due."""
        if not self.due(transcript):
            return None
        measure, limit = self.pressure(transcript)
        report = await self._round(
            transcript,
            summarize,
            measure,
            limit,
            self.toolcall_keep_max,
            self.summary_keep_max,
            self.max_retries,
            [],
        )
        self.reports.append(report)
        del self.reports[:-16]
        return report

    async def _round(
        self,
        transcript: Transcript,
        summarize: Summarize,
        estimate: float,
        limit: float,
        toolcall_keep: int,
        summary_keep: int,
        remaining: int,
        steps: list[ToolCallCompactResult | SummaryCompactResult],
    ) -> AutoCompactReport:
        reclaimed = transcript.compact_toolcall(toolcall_keep)
        steps.append(reclaimed)
        estimate *= 1.0 - reclaimed.reclaimed_fraction
        target = limit * ESCALATION_RATIO
        if transcript.counters.tool_rounds < self.escalation_rounds and estimate <= target:
            transcript.total_tokens = None
            return AutoCompactReport(SummaryStatus.COMPACTED, tuple(steps), estimate, limit)
        plan = transcript.plan_summary(summary_keep)
        summary = None if plan is None else await summarize(plan.head, transcript.summary)
        summarized = transcript.apply_summary(plan, summary)
        steps.append(summarized)
        if summarized.status is not SummaryStatus.COMPACTED:
            # Tier 2 left the transcript untouched; the token count stays, as docs/tools.md says.
            return AutoCompactReport(
                summarized.status, tuple(steps), estimate, limit, still_over=estimate > target
            )
        estimate *= 1.0 - summarized.reclaimed_fraction
        if estimate <= target:
            return AutoCompactReport(SummaryStatus.COMPACTED, tuple(steps), estimate, limit)
        if remaining == 0:
            return AutoCompactReport(
                SummaryStatus.COMPACTED, tuple(steps), estimate, limit, still_over=True
            )
        return await self._round(
            transcript,
            summarize,
            estimate,
            limit,
            toolcall_keep // 2,
            summary_keep // 2,
            remaining - 1,
            steps,
        )
