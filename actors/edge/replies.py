"""A front end's view of its turns: publish a ``UserQuery``, follow the replies to it.

Why: ``xrmq say``, ``xrmq chat`` and ``xrmq demo`` all ask the edge box something and
wait for the answer. The router uses each query's envelope ``message_id`` as the turn
id, and every reply fragment carries it as ``request_id``; ``ReplyCollector`` (an actor
on the voice output topic and the router's ``TurnEnded`` topic) gathers the fragments
of the turns it was told about.

A turn is done when a destination sends its final frame (an interrupted answer is
finalized with an empty one) or when the router's ``TurnEnded`` for it arrives,
whichever comes first. Router text (source ``router``: an acknowledgement, or what the
router says instead of an answer) does not end the turn by itself, since a
destination's reply may follow it; the ``TurnEnded`` published right after it does, and
carries the cause of a failure (``Turn.outcome``). ``Turn.wait_outcome`` waits for that
last word after the answer, so a failure after the first chunk is seen too: a front end
prints such a partial answer with ``Turn.midway`` after it (``" [reply failed mid-way:
<cause>]"``), never as if the cut sentence were the whole answer.

A query is delivered at most once: the router keeps no queue, so a query published
while the router is down or hung, or while the broker restarts, is lost. With
``router_silence_s`` the collector tells its turns so instead of leaving them waiting:
it follows the router's heartbeat (a runtime whose ``RuntimeMetrics`` carry ``router.*``
gauges), and a turn nothing answered yet ends ``failed`` with ``RouterUnavailable`` once
no router was heard for ``router_silence_s`` (also when none was ever heard), or with
``RouterRestarted`` when a router heartbeats whose incarnation started after the query
was sent (its epoch is its start time: what reached the one before is gone). A turn a
destination is already answering is left to its final frame.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from xrmq.actors.runtime import Agent, AgentRuntime, Handler, Handlers, RuntimeContext
from xrmq.schemas import ResponseOutput, RuntimeMetrics, TurnEnded, UserQuery
from xrmq.topics import (
    METRICS_TOPIC,
    QUERY_TOPIC,
    ROUTER_SOURCE,
    TURN_ENDED_TOPIC,
    VOICE_OUTPUT_TOPIC,
    Topic,
)

ROUTER_SILENCE_S = 5.0
"""A front end's default: a router unheard this long is down (the supervisor's default
liveness timeout, five of its one-second heartbeats)."""

FAILED_STATUSES = ("failed", "unanswered", "canceled")
"""``TurnEnded.status`` values a front end reports as a failed turn."""


@dataclass
class Turn:
    """One query and what came back for it so far."""

    participant_id: str
    text: str
    request_id: str
    sent: float
    """``time.monotonic()`` when the query was handed to the bus."""
    sent_us: int = 0
    """Wall-clock microseconds when the query was sent (its ``UserQuery.timestamp_us``)."""
    first_chunk_s: float | None = None
    """Seconds from ``sent`` to the first fragment with text, at the collector."""
    parts: list[tuple[str, str]] = field(default_factory=list)
    """(source, text) of every fragment with text, in arrival order."""
    started: asyncio.Event = field(default_factory=asyncio.Event)
    """Set with the first fragment that has text."""
    done: asyncio.Event = field(default_factory=asyncio.Event)
    outcome: TurnEnded | None = None
    """The router's ``TurnEnded`` for the turn, once it arrived."""
    ended: asyncio.Event = field(default_factory=asyncio.Event)
    """Set when ``outcome`` arrived."""

    @property
    def answer(self) -> str:
        """What the destinations said (router text left out)."""
        return "".join(text for source, text in self.parts if source != ROUTER_SOURCE)

    @property
    def router_text(self) -> str:
        """What the router said before any destination's text (an acknowledgement, or
        what it said instead of an answer)."""
        return " ".join(self._router_parts(before=True))

    @property
    def router_after(self) -> str:
        """What the router said once a destination had begun: its apology for an answer
        that failed mid-way (when it arrived before the destination's final frame)."""
        return " ".join(self._router_parts(before=False))

    def _router_parts(self, *, before: bool) -> list[str]:
        began = False
        found = []
        for source, text in self.parts:
            if source != ROUTER_SOURCE:
                began = True
            elif began != before:
                found.append(text)
        return found

    @property
    def spoken(self) -> str:
        """Everything said for the turn, in the order it is played."""
        said = (self.router_text, self.answer.strip(), self.router_after)
        return " ".join(part for part in said if part)

    @property
    def failure(self) -> str | None:
        """``"<status>: <cause>"`` when the router ended the turn without an answer, else None."""
        outcome = self.outcome
        if outcome is None or outcome.status not in FAILED_STATUSES:
            return None
        return f"turn {outcome.status}: {outcome.error or 'no cause given'}"

    @property
    def midway(self) -> str:
        """``" [reply failed mid-way: <cause>]"`` when the turn failed after a destination
        had started answering, else ``""``: the marker a front end prints after the
        partial answer."""
        outcome = self.outcome
        if outcome is None or outcome.status != "failed" or not self.answer.strip():
            return ""
        return f" [reply failed mid-way: {outcome.error or 'no cause given'}]"

    @property
    def marked(self) -> str:
        """What a text front end prints: the router's text, the answer and the ``midway``
        marker, which stands for the router's apology after a mid-way failure."""
        said = " ".join(part for part in (self.router_text, self.answer.strip()) if part)
        return said + self.midway if self.midway else self.spoken

    async def wait(self, timeout: float, *, budget: float | None = None) -> None:
        """Wait until the turn is done; ``TimeoutError`` naming the turn and ``budget`` (the
        whole wait since the query was sent; default ``timeout``) otherwise."""
        try:
            await asyncio.wait_for(self.done.wait(), timeout)
        except TimeoutError:
            heard = f" (heard so far: {self.spoken!r})" if self.parts else " (no reply at all)"
            raise TimeoutError(
                f"no complete answer to {self.participant_id}'s {self.text!r} within "
                f"{timeout if budget is None else budget:g}s{heard}"
            ) from None

    async def wait_outcome(self, grace: float) -> TurnEnded | None:
        """After ``wait``: the router's ``TurnEnded``, waiting at most ``grace`` seconds for it
        (it follows a destination's final frame at once; None if it never comes)."""
        try:
            await asyncio.wait_for(self.ended.wait(), grace)
        except TimeoutError:
            pass
        return self.outcome


Fragment = Callable[[Turn, str, str, bool], None]
"""``on_fragment(turn, source, text, final)``: called for every fragment of a known turn."""


class ReplyCollector(Agent):
    """Follows the replies on ``output_topic`` (and the router's ``TurnEnded`` on
    ``turn_topic``) to the turns registered with ``expect``."""

    def __init__(
        self,
        output_topic: Topic[ResponseOutput] = VOICE_OUTPUT_TOPIC,
        *,
        on_fragment: Fragment | None = None,
        turn_topic: Topic[TurnEnded] = TURN_ENDED_TOPIC,
        router_silence_s: float | None = None,
    ) -> None:
        if router_silence_s is not None and not router_silence_s > 0:
            raise ValueError("ReplyCollector.router_silence_s: must be positive (or None)")
        self.output_topic = output_topic
        self.turn_topic = turn_topic
        self.on_fragment = on_fragment
        self.router_silence_s = router_silence_s
        self.turns: dict[str, Turn] = {}
        self._heard_router = False
        self._router_heard = time.monotonic()
        """When a router was last heard (at first: when the collector was made)."""
        self._watching: asyncio.Task[None] | None = None

    def handlers(self) -> Handlers:
        handlers: dict[Topic[Any], Handler] = {
            self.output_topic: self.on_output,
            self.turn_topic: self.on_turn_ended,
        }
        if self.router_silence_s is not None:
            handlers[METRICS_TOPIC] = self.on_heartbeat
        return handlers

    async def on_start(self) -> None:
        if self.router_silence_s is not None:
            self._router_heard = time.monotonic()
            self._watching = asyncio.create_task(self._watch_router(self.router_silence_s))

    async def on_stop(self) -> None:
        if self._watching is not None:
            self._watching.cancel()
            await asyncio.gather(self._watching, return_exceptions=True)

    async def on_heartbeat(self, metrics: RuntimeMetrics, ctx: RuntimeContext) -> None:
        """A runtime's heartbeat: a router's shows it alive; one whose incarnation started
        after a turn's query was sent (its epoch is its start time) never saw that query."""
        if not any(name.startswith("router.") for name in metrics.gauges):
            return
        self._router_heard = time.monotonic()
        self._heard_router = True
        self._lose(
            f"RouterRestarted: the router ({metrics.runtime}) started after the query was "
            "sent (it was starting or restarting) and never saw it; ask again",
            sent_before_us=metrics.epoch,
        )

    async def _watch_router(self, silence_s: float) -> None:
        while True:
            await asyncio.sleep(min(silence_s / 4, 0.5))
            silent = time.monotonic() - self._router_heard
            if silent > silence_s:
                heard = "the router not" if self._heard_router else "no router"
                self._lose(
                    f"RouterUnavailable: {heard} heard on the bus for {silent:.1f}s "
                    "(down, hung, or the broker restarting); the query was not taken, "
                    "ask again once `xrmq top` shows the router"
                )

    def _lose(self, cause: str, *, sent_before_us: int | None = None) -> None:
        """End every turn nothing answered yet (sent before ``sent_before_us``, wall-clock
        microseconds, if given) as failed with ``cause``."""
        for request_id, turn in list(self.turns.items()):
            if turn.parts or turn.done.is_set():
                continue
            if sent_before_us is not None and not turn.sent_us < sent_before_us:
                continue
            del self.turns[request_id]
            turn.outcome = TurnEnded(request_id, "failed", None, cause)
            turn.ended.set()
            turn.done.set()

    def expect(self, turn: Turn) -> Turn:
        self.turns[turn.request_id] = turn
        return turn

    async def on_output(self, message: ResponseOutput, ctx: RuntimeContext) -> None:
        turn = self.turns.get(message.request_id or "")
        if turn is None or turn.done.is_set():
            return
        source = ctx.metadata.source
        if message.text:
            if turn.first_chunk_s is None:
                turn.first_chunk_s = time.monotonic() - turn.sent
                turn.started.set()
            turn.parts.append((source, message.text))
        if self.on_fragment is not None:
            self.on_fragment(turn, source, message.text, message.final)
        if message.final and source != ROUTER_SOURCE:
            turn.done.set()

    async def on_turn_ended(self, message: TurnEnded, ctx: RuntimeContext) -> None:
        turn = self.turns.pop(message.request_id, None)  # nothing follows a turn's end
        if turn is None:
            return
        turn.outcome = message
        turn.ended.set()
        turn.done.set()


def ask(
    runtime: AgentRuntime,
    collector: ReplyCollector,
    participant_id: str,
    text: str,
    *,
    source: str = "text-input",
    images: tuple[str, ...] = (),
    traceparent: str | None = None,
) -> Turn:
    """Publish ``text`` (with ``images``, data or http(s) URLs) as ``participant_id``'s
    query; the returned turn fills in as replies arrive.

    The turn is registered before the loop can deliver anything, so no fragment is missed.
    ``traceparent``: the W3C trace context of a caller that traces (the turn joins its trace).
    """
    sent, sent_us = time.monotonic(), time.time_ns() // 1000
    request_id = runtime.send(
        QUERY_TOPIC,
        UserQuery(text, sent_us, images=images),
        participant_id=participant_id,
        source=source,
        traceparent=traceparent,
    )
    return collector.expect(Turn(participant_id, text, request_id, sent, sent_us=sent_us))
