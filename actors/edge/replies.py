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
<cause>]"``), never as if the cut sentence were the whole answer (issue 29, item 4).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from xrmq.actors.runtime import Agent, AgentRuntime, Handlers, RuntimeContext
from xrmq.schemas import ResponseOutput, TurnEnded, UserQuery
from xrmq.topics import QUERY_TOPIC, ROUTER_SOURCE, TURN_ENDED_TOPIC, VOICE_OUTPUT_TOPIC, Topic

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

    async def wait(self, timeout: float) -> None:
        """Wait until the turn is done; ``TimeoutError`` naming the turn otherwise."""
        try:
            await asyncio.wait_for(self.done.wait(), timeout)
        except TimeoutError:
            heard = f" (heard so far: {self.spoken!r})" if self.parts else " (no reply at all)"
            raise TimeoutError(
                f"no complete answer to {self.participant_id}'s {self.text!r} within "
                f"{timeout:g}s{heard}"
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
    ) -> None:
        self.output_topic = output_topic
        self.turn_topic = turn_topic
        self.on_fragment = on_fragment
        self.turns: dict[str, Turn] = {}

    def handlers(self) -> Handlers:
        return {self.output_topic: self.on_output, self.turn_topic: self.on_turn_ended}

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
) -> Turn:
    """Publish ``text`` as ``participant_id``'s query; the returned turn fills in as replies arrive.

    The turn is registered before the loop can deliver anything, so no fragment is missed.
    """
    sent = time.monotonic()
    request_id = runtime.send(
        QUERY_TOPIC,
        UserQuery(text, time.time_ns() // 1000),
        participant_id=participant_id,
        source=source,
    )
    return collector.expect(Turn(participant_id, text, request_id, sent))
