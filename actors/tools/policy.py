"""Automatic compaction: ``CompactorAbstract`` and docs/tools.md's ``AutoCompactor``.

A compactor is called before each model call of a turn with the agent as it compacts
(``Compacting``: the participant's conversation and the summarizer) and decides alone
what to do; a custom strategy subclasses ``CompactorAbstract`` and implements
``auto_compact(agent)``. ``AutoCompactor`` is docs/tools.md's policy, pure apart from the
injected ``summarize`` coroutine (the compaction workers, or a model directly).

Trigger: the last response's ``total_tokens`` above ``token_threshold``, and nothing else
(no fallback to the transcript's size: a stale or unknown size never fires). A provider
that reports no usage gets its total counted by litellm's tokenizer
(``estimate_total_tokens``, marked estimated), so the trigger stays one number. A round
reclaims old tool results (tier 1); it is done when fewer than ``escalation_rounds`` tier-1
rounds ran in a row and the estimate after reclaiming is at most ``threshold *
ESCALATION_RATIO``; otherwise it escalates to a summary (tier 2) in the same round, of the
current turn's messages too. Still over after a summary, up to ``max_retries`` further
rounds run, each halving both keep values. The token count is cleared after a compaction,
so the stale count of the response before it does not fire again at once: only the next
usage report can.
"""

from __future__ import annotations

import abc
import asyncio
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from xrmq.actors.models import ChatMessage
from xrmq.actors.models.openai_messages import message_dict, request_messages

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

Summarize = Callable[[tuple[Any, ...], str | None], Awaitable[str | None]]
"""``summarize(head, previous_summary)`` returns the new summary, or ``None`` on failure;
``head`` is OpenAI's typed chat messages (a ``Conversation`` 's)."""


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


@dataclass(frozen=True, slots=True)
class Compacting:
    """What a compactor is given of the agent: the participant's conversation (the
    ``Transcript``) and the agent's summarizer."""

    conversation: Transcript
    summarize: Summarize
    participant_id: str = ""


class CompactorAbstract(abc.ABC):
    """The base of a compaction strategy: implement ``auto_compact(agent)``.

    It is awaited before every model call of a turn while ``enabled``; what it returns is
    logged. ``toolcall_keep_max`` and ``summary_keep_max`` are also what the manual tiers
    (``ToolAgent.compact``, ``/compact``) keep.
    """

    enabled: bool = True
    toolcall_keep_max: int = TOOLCALL_KEEP_MAX
    summary_keep_max: int = SUMMARY_KEEP_MAX

    @abc.abstractmethod
    async def auto_compact(self, agent: Compacting) -> AutoCompactReport | None:
        """Compact ``agent.conversation`` if this strategy says so; ``None``: it did not."""


@dataclass
class AutoCompactor(CompactorAbstract):
    """docs/tools.md's ``AutoCompactor``: every parameter with the seed's default."""

    toolcall_keep_max: int = TOOLCALL_KEEP_MAX
    summary_keep_max: int = SUMMARY_KEEP_MAX
    escalation_rounds: int = 2
    max_retries: int = 2
    token_threshold: int = TOKEN_THRESHOLD
    enabled: bool = True
    reports: list[AutoCompactReport] = field(default_factory=list, repr=False)
    """The most recent reports (at most 16), newest last."""

    def __post_init__(self) -> None:
        for name in ("toolcall_keep_max", "summary_keep_max", "escalation_rounds", "max_retries"):
            if getattr(self, name) < 0:
                raise ValueError(f"AutoCompactor.{name}: must be >= 0")
        if self.token_threshold <= 0:
            raise ValueError("AutoCompactor.token_threshold: must be positive")

    def due(self, transcript: Transcript) -> bool:
        """Whether the last reported (or estimated) ``total_tokens`` is over the threshold."""
        tokens = transcript.total_tokens
        return self.enabled and tokens is not None and tokens > self.token_threshold

    async def auto_compact(self, agent: Compacting) -> AutoCompactReport | None:
        """Compact when due; ``None`` when not due."""
        transcript = agent.conversation
        if not self.due(transcript) or transcript.total_tokens is None:
            return None
        report = await self._round(
            transcript,
            agent.summarize,
            float(transcript.total_tokens),
            float(self.token_threshold),
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


def count_message_tokens(
    model: str, messages: Sequence[ChatMessage | Mapping[str, Any]], answer: str
) -> int:
    """litellm's ``token_counter`` over a request and its answer, as OpenAI messages (the
    request's messages as they were sent: ``ChatMessage`` s or OpenAI's typed dicts)."""
    from xrmq.actors.models.litellm_service import import_litellm

    litellm = import_litellm()
    views, given = request_messages(messages)
    request = list(given) if given else [message_dict(message) for message in views]
    counted = [*request, {"role": "assistant", "content": answer}] if answer else request
    return int(litellm.token_counter(model=model, messages=counted))


async def estimate_total_tokens(
    model: str, messages: Sequence[ChatMessage | Mapping[str, Any]], answer: str
) -> int:
    """``count_message_tokens`` off the event loop: litellm's import and a long transcript's
    tokenization are seconds of CPU that would stall every actor of the process."""
    return await asyncio.to_thread(count_message_tokens, model, tuple(messages), answer)
