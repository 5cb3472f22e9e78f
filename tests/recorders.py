"""Test support: actors that record what arrives on context topics and on `xrmq.turns`."""

from __future__ import annotations

import asyncio

from xrmq.actors.runtime import Agent, RuntimeContext
from xrmq.schemas import ConversationContextUpdate, TurnRecord
from xrmq.topics import TURNS_TOPIC, context_topic


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


class TurnRecorder(Agent):
    """Records every ``TurnRecord`` the router publishes on ``xrmq.turns``."""

    def __init__(self) -> None:
        self.records: list[TurnRecord] = []
        self.changed = asyncio.Event()

    def handlers(self):
        return {TURNS_TOPIC: self.on_record}

    async def on_record(self, record: TurnRecord, ctx: RuntimeContext) -> None:
        self.records.append(record)
        self.changed.set()

    async def until(self, count: int, timeout: float = 20) -> list[TurnRecord]:
        while len(self.records) < count:
            self.changed.clear()
            await asyncio.wait_for(self.changed.wait(), timeout)
        return self.records
