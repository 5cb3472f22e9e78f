"""The safe-boundary rule of a realtime rollover.

A session may be replaced only when nothing is in flight that the replacement would
lose or cut: the user's turn is complete, the assistant's response is complete, no tool
call or confirmation is pending, and no assistant audio is still playing (the speaker
side's ``audio.playback`` ``done``). :meth:`Boundary.blockers` names what is unsafe now,
so a deferred rollover can say what it waits for.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

Blocker = Literal["user_turn", "response", "tool_call", "playback"]


@dataclass(slots=True)
class Boundary:
    user_turn_open: bool = False
    """Speech started and the turn was not yet committed."""
    response_active: bool = False
    """The provider is producing a response (created, not yet done)."""
    pending_tools: int = 0
    """Tool calls or confirmations awaiting their result."""
    playing: bool = False
    """Assistant audio is playing at the participant (playback started, not done)."""

    def blockers(self) -> tuple[Blocker, ...]:
        found: list[Blocker] = []
        if self.user_turn_open:
            found.append("user_turn")
        if self.response_active:
            found.append("response")
        if self.pending_tools > 0:
            found.append("tool_call")
        if self.playing:
            found.append("playback")
        return tuple(found)

    @property
    def safe(self) -> bool:
        return not self.blockers()
