"""Routing contracts (the upstream xr_ai_routing types) as wire types.

They are msgspec Structs so a router can reach a destination in another process over
the bus with the same types it uses in-process.
"""

from __future__ import annotations

from typing import Literal

import msgspec

from ._validation import require, require_name, require_text


class AgentExchange(msgspec.Struct, frozen=True):
    """One completed user request plus the destination-provided response context."""

    request: str
    response: str
    timestamp_us: int | None = None
    exchange_id: str | None = None
    """Identity of the exchange (the turn id) so reconciliation never replays it."""
    destination: str | None = None


class AgentTurn(msgspec.Struct, frozen=True):
    """The current user turn and the complete exchanges selected for this destination.

    Positional construction follows the seed: ``AgentTurn(participant_id, turn_id, text)``.
    """

    participant_id: str
    turn_id: str
    text: str
    history: tuple[AgentExchange, ...] = ()
    timestamp_us: int | None = None

    def __post_init__(self) -> None:
        require_name(self.participant_id, "AgentTurn", "participant_id")
        require_name(self.turn_id, "AgentTurn", "turn_id")
        require_text(self.text, "AgentTurn", "text")


class RoutingAid(msgspec.Struct, frozen=True):
    """Brief routing metadata, separate from the destination's full instructions."""

    description: str
    eligible: bool = True
    priority: int = 0
    keywords: tuple[str, ...] = ()
    """Words that make a rule-based decision service pick this destination."""

    def __post_init__(self) -> None:
        require_text(self.description, "RoutingAid", "description")


Disposition = Literal["accept", "decline", "clarify", "release"]


class Admission(msgspec.Struct, frozen=True):
    """A destination's decision, made before it speaks or starts work.

    ``accept`` permits work (``focus=True`` also takes explicit focus); ``decline`` returns
    control for another route; ``clarify`` ends routing with ``text`` as a question;
    ``release`` clears focus and returns the same query to ordinary routing.
    """

    disposition: Disposition
    text: str = ""
    focus: bool = False

    def __post_init__(self) -> None:
        if self.disposition == "clarify":
            require_text(self.text, "Admission", "text")
        require(not self.focus or self.disposition == "accept", "Admission", "focus", "only an accept can take focus")


FocusTransition = Literal["take", "release"]


class DestinationResult(msgspec.Struct, frozen=True):
    """Optional completed response context and the router's focus transition."""

    response: str | None = None
    focus: FocusTransition | None = None
