"""What ``xrmq demo`` watches of the stack it runs: the stack's own traffic and the voice
output.

``StackObserver`` follows the context section views, compaction results and every
runtime's metrics, and waits until a message makes a condition true; ``PrintingSink`` is
the demo's renderer sink, printing each response as it plays with its latency and
waiting for a request to play or end. Every wait is bounded: past its timeout it
raises ``DemoFailure`` saying what did not happen.
"""

from __future__ import annotations

import asyncio
import time
from collections import defaultdict
from collections.abc import Callable
from typing import TextIO

from xrmq.actors.runtime import Agent, Handler, Handlers, RuntimeContext
from xrmq.actors.voice import ResponseEnded, Segment
from xrmq.schemas import RuntimeMetrics
from xrmq.topics import METRICS_TOPIC, Topic

from .config import EdgeConfig
from .stack import plan_of


class DemoFailure(RuntimeError):
    """A part of the demo failed; the message says which."""


class StackObserver(Agent):
    """Watches the stack's own traffic: context section views, compaction results, metrics.

    ``until(predicate)`` waits until a message made ``predicate()`` true.
    """

    def __init__(self, config: EdgeConfig) -> None:
        topics = plan_of(config).topics
        self._handlers: dict[Topic, Handler] = {
            topics.view: self.on_view,
            METRICS_TOPIC: self.on_metrics,
            topics.dialogue_result: self.on_compaction,
        }
        for name, topic in config.context.topics.items():
            if topic.mode == "incremental":
                self._handlers[topics.topic_result(name)] = self.on_compaction
        self.seen: dict[tuple[str, str], list[str]] = defaultdict(list)
        """Block texts of every view, by (participant, section)."""
        self.summaries: dict[tuple[str, str], list[str]] = {}
        """The rolling summaries in the latest view of each (participant, section)."""
        self.compactions: dict[str, int] = defaultdict(int)
        """Compaction results with a summary, by section."""
        self.metrics: dict[str, RuntimeMetrics] = {}
        """The latest report of each runtime."""
        self._changed = asyncio.Condition()

    def handlers(self) -> Handlers:
        return self._handlers

    async def on_view(self, message, ctx: RuntimeContext) -> None:
        key = (ctx.participant_id or "", message.section)
        self.seen[key].extend(block.text for block in message.blocks)
        self.summaries[key] = [block.text for block in message.blocks if block.timestamp_us is None]
        await self._notify()

    def forget(self, participant_id: str) -> None:
        """Drop what was seen of a participant whose context was cleared."""
        for key in [key for key in self.summaries if key[0] == participant_id]:
            del self.summaries[key]

    async def on_compaction(self, message, ctx: RuntimeContext) -> None:
        if message.result.error is None and message.result.text:
            self.compactions[message.result.job.section] += 1
        await self._notify()

    async def on_metrics(self, message: RuntimeMetrics, ctx: RuntimeContext) -> None:
        self.metrics[message.runtime] = message
        await self._notify()

    async def _notify(self) -> None:
        async with self._changed:
            self._changed.notify_all()

    async def until(self, predicate: Callable[[], bool], timeout: float, what: str) -> None:
        try:
            async with asyncio.timeout(timeout):
                async with self._changed:
                    await self._changed.wait_for(predicate)
        except TimeoutError:
            raise DemoFailure(f"{what}: not within {timeout:g}s") from None


class PrintingSink:
    """The renderer's sink: prints each response as it plays, one line per response.

    Playing is not paced (a text demo), so a line grows as fragments arrive. A line
    opens with the participant, the producer and the latency from the query's input
    time; a response that did not complete ends with its reason (``<interrupted>``).
    """

    def __init__(self, out: TextIO) -> None:
        self.out = out
        self._open: tuple[str, int] | None = None
        self._requests: dict[tuple[str, int], str | None] = {}
        self.ended: dict[str, str] = {}
        """End reason of each request whose reply played."""
        self.changed = asyncio.Event()

    async def play(self, segment: Segment) -> None:
        key = (segment.participant_id, segment.response)
        if self._open != key:
            self._close("")
            latency = ""
            if segment.timestamp_us is not None:
                latency = f" +{(time.time_ns() // 1000 - segment.timestamp_us) / 1000:.0f}ms"
            self.out.write(f"    [{segment.participant_id}] {','.join(segment.sources)}{latency}: ")
            self._open = key
            self._requests[key] = segment.request_id
            self.changed.set()
        self.out.write(segment.text if segment.first else " " + segment.text)
        self.out.flush()

    async def end(self, ended: ResponseEnded) -> None:
        key = (ended.participant_id, ended.response)
        marker = "" if ended.reason == "completed" else f" <{ended.reason}>"
        if self._open == key:
            self._close(marker)
        else:
            self.out.write(f"    [{ended.participant_id}] {','.join(ended.sources)}:{marker}\n")
        request = self._requests.pop(key, None)
        if request is not None:
            self.ended[request] = ended.reason
            self.changed.set()

    def _close(self, marker: str) -> None:
        if self._open is not None:
            self.out.write(marker + "\n")
            self.out.flush()
            self._open = None

    async def wait_playing(self, request_id: str, timeout: float) -> None:
        await self._until(
            lambda: request_id in self._requests.values() or request_id in self.ended,
            timeout,
            f"the renderer playing request {request_id}",
        )

    async def wait_ended(self, request_id: str, timeout: float) -> str:
        await self._until(
            lambda: request_id in self.ended,
            timeout,
            f"the renderer finishing request {request_id}",
        )
        return self.ended[request_id]

    async def _until(self, predicate: Callable[[], bool], timeout: float, what: str) -> None:
        try:
            async with asyncio.timeout(timeout):
                while not predicate():
                    self.changed.clear()
                    await self.changed.wait()
        except TimeoutError:
            raise DemoFailure(f"{what}: not within {timeout:g}s") from None
