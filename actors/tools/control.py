"""Manual compaction over the bus: ``CompactServer`` (``/compact`` in ``xrmq chat``).

Tools destination NAME answers asks on ``tools.NAME.compact`` (``CompactRequest`` ->
``CompactReply``) for the envelope's participant by running ``ToolAgent.compact``, and
reports the agent's docs/tools.md counters per tier as gauges ``tools.NAME.<counter>``
(``ToolAgent.tier_counters``), which ``xrmq top`` shows on a line of their own.
"""

from __future__ import annotations

from typing import Literal

from xrmq.actors.runtime import Agent, Handlers, RuntimeContext
from xrmq.schemas.tools import CompactReply, CompactRequest
from xrmq.topics import Topic

from .tiers import SummaryCompactResult
from .tool_agent import ToolAgent


def compact_topic(destination: str) -> Topic[CompactRequest]:
    """Where tools destination ``destination`` takes manual compactions."""
    return Topic(f"tools.{destination}.compact", CompactRequest)


class CompactServer(Agent):
    """Runs manual compactions of ``agent``'s transcripts for tools destination ``destination``."""

    def __init__(self, destination: str, agent: ToolAgent) -> None:
        self.destination = destination
        self.topic = compact_topic(destination)
        self.agent = agent

    def handlers(self) -> Handlers:
        return {self.topic: self.on_compact}

    def gauges(self) -> dict[str, float]:
        prefix = f"tools.{self.destination}."
        return {prefix + name: value for name, value in self.agent.tier_counters().items()}

    async def on_compact(self, message: CompactRequest, ctx: RuntimeContext) -> CompactReply:
        if ctx.participant_id is None:
            raise ValueError("CompactRequest: the envelope must name the participant")
        tier: Literal["toolcall", "summary"] = (
            "toolcall" if message.tier == "toolcall" else "summary"
        )
        result = await self.agent.compact(ctx.participant_id, tier=tier)
        if isinstance(result, SummaryCompactResult):
            return CompactReply(tier, result.status.value, result.reclaimed_fraction)
        return CompactReply(
            tier,
            "compacted" if result.reclaimed_count else "nothing_to_condense",
            result.reclaimed_fraction,
            result.reclaimed_count,
        )
