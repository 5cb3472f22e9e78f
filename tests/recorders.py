"""Test support: an actor that records what arrives on context topics."""

from __future__ import annotations

import asyncio

from xrmq.actors.runtime import Agent, RuntimeContext
from xrmq.schemas import ConversationContextUpdate
from xrmq.topics import context_topic


class ContextRecorder(Agent):
    """Records every update of the given context topics as (topic, participant, source, text)."""

    def __init__(self, *topics: str) -> None:
        self._handlers = {context_topic(name): self.on_update for name in topics}
        self.updates: list[tuple[str, str | None, str, str]] = []
        self.changed = asyncio.Event()

    def handlers(self):
        return self._handlers

    async def on_update(self, message: ConversationContextUpdate, ctx: RuntimeContext) -> None:
        self.updates.append((ctx.topic.name, ctx.participant_id, ctx.metadata.source, message.text))
        self.changed.set()

    async def until(self, count: int) -> None:
        while len(self.updates) < count:
            self.changed.clear()
            await asyncio.wait_for(self.changed.wait(), 20)
