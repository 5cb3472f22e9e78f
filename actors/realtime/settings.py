"""A realtime session's settings and what it reports (``RealtimeSession`` takes both).

Kept apart from the session's shell so the settings can be read, built and validated
(by the edge box's config, the bench) without the session's machinery.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from .pressure import PressurePolicy
from .provider import ResponseDone
from .rollover import MachineSettings


@dataclass(frozen=True, slots=True)
class SessionSettings:
    machine: MachineSettings = field(default_factory=MachineSettings)
    pressure: PressurePolicy = field(default_factory=PressurePolicy)
    keep_tail: int = 4
    """Messages of the snapshot kept verbatim after the summary."""
    retry_backoff_s: float = 0.25
    """Wait before the first connect retry; doubles per retry."""
    checkpoint_attempts: int = 3
    server_vad: bool = True
    boundary_wait_s: float = 20.0
    """How long a scheduled rollover waits for a safe boundary (an open user turn, a
    playback whose end never comes) before it is given up for the session's natural end."""
    standby_attempts: int = 3
    """Opens of a standby session per rollover (a failed connect, a drop, an expiry, a
    changed message reopen it) before it is abandoned for the reconnect path."""

    def __post_init__(self) -> None:
        if self.keep_tail < 0:
            raise ValueError("SessionSettings.keep_tail: must be >= 0")
        if not self.retry_backoff_s >= 0:
            raise ValueError("SessionSettings.retry_backoff_s: must be >= 0")
        if self.checkpoint_attempts < 1:
            raise ValueError("SessionSettings.checkpoint_attempts: must be >= 1")
        if not self.boundary_wait_s > 0:
            raise ValueError("SessionSettings.boundary_wait_s: must be > 0")
        if self.standby_attempts < 1:
            raise ValueError("SessionSettings.standby_attempts: must be >= 1")


class SessionListener:
    """What a session reports; override what you need (every method is a no-op here)."""

    async def speech_started(self) -> None: ...

    async def user_text(self, text: str) -> None: ...

    async def audio(self, response_id: str, pcm: bytes) -> None: ...

    async def text(self, response_id: str, delta: str) -> None: ...

    async def response_done(self, user_text: str, done: ResponseDone) -> None: ...

    async def failed(self, reason: str) -> None: ...
