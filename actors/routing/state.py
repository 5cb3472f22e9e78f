"""Pure routing state of one participant: explicit focus and the bounded shared history.

No I/O and no awaits: the router applies admissions and destination results here and
acts on what the methods return (for example, which destination lost focus and must be
told with ``release()``).
"""

from __future__ import annotations

from collections import deque
from collections.abc import Mapping

from xrmq.schemas import AgentExchange, RoutingAid


class ParticipantRouting:
    """Who holds a participant's focus, and the completed exchanges every destination sees.

    History keeps the newest ``history_limit`` exchanges (0 keeps none), oldest first.
    """

    __slots__ = ("focus", "history")

    def __init__(self, history_limit: int) -> None:
        self.focus: str | None = None
        self.history: deque[AgentExchange] = deque(maxlen=history_limit)

    def take_focus(self, name: str) -> str | None:
        """Give ``name`` the focus; return the previous holder if it was another destination."""
        previous, self.focus = self.focus, name
        return previous if previous not in (None, name) else None

    def clear_focus(self, name: str) -> bool:
        """Drop the focus if ``name`` holds it; True if it did."""
        if self.focus == name:
            self.focus = None
            return True
        return False

    def remember(self, exchange: AgentExchange) -> None:
        """Append a completed exchange; the oldest one beyond the limit is forgotten."""
        if self.history.maxlen:
            self.history.append(exchange)


def candidates(
    aids: Mapping[str, RoutingAid], excluded: set[str] | frozenset[str] = frozenset()
) -> dict[str, RoutingAid]:
    """The destinations a decision may choose: eligible and not excluded, in registration order."""
    return {name: aid for name, aid in aids.items() if aid.eligible and name not in excluded}
