"""The provider adapter interface of a realtime speech-to-speech session.

A provider (``RealtimeProvider``) opens connections; ``connect`` returns only after the
provider explicitly acknowledged the session *and* every seeded item (returning right
after sending ``session.update`` would not be a contract strong enough to replay the
backlog reliably), so the backlog may be replayed the moment it returns. It
raises ``RealtimeConnectError`` when the connection is refused or the acknowledgement does
not come within ``ready_timeout_s``.

A connection (``RealtimeConnection``) takes input (audio, commit, a text turn, response
requests) and yields normalized events (``RealtimeEvent``); its stream ends with one
``Disconnected`` whoever closed it. Each adapter declares the session limits it knows
(``RealtimeLimits``) and whether proactive rollover is validated for it
(``proactive_rollover``; otherwise the checkpoint waits for the next natural disconnect),
and, honestly, how many sessions it allows at once (``max_concurrent_sessions``: a
standby session opened before a rollover needs 2) and how long it keeps a session that
receives nothing (``standby_idle_s``, None: no such limit).
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Literal, Protocol

from .checkpoint import Role
from .pressure import RealtimeLimits, Usage


class RealtimeConnectError(RuntimeError):
    """A session could not be opened or was not acknowledged in time."""


@dataclass(frozen=True, slots=True)
class SeedItem:
    role: Role
    text: str


@dataclass(frozen=True, slots=True)
class SessionSeed:
    """What a new session starts from: instructions (shared context, summary) and items."""

    instructions: str
    items: tuple[SeedItem, ...] = ()
    server_vad: bool = True
    """The provider detects turns (speech started/stopped) and answers by itself."""


@dataclass(frozen=True, slots=True)
class SpeechStarted:
    pass


@dataclass(frozen=True, slots=True)
class SpeechStopped:
    pass


@dataclass(frozen=True, slots=True)
class InputCommitted:
    item_id: str


@dataclass(frozen=True, slots=True)
class InputTranscript:
    """The provider's transcript of a committed user audio turn."""

    item_id: str
    text: str


@dataclass(frozen=True, slots=True)
class ResponseStarted:
    response_id: str


@dataclass(frozen=True, slots=True)
class OutputItem:
    """The assistant item a response speaks into (what ``truncate`` names)."""

    response_id: str
    item_id: str


@dataclass(frozen=True, slots=True)
class ItemTruncated:
    """The provider cut an assistant item to the audio the participant heard."""

    item_id: str
    audio_end_ms: int


@dataclass(frozen=True, slots=True)
class AudioDelta:
    response_id: str
    pcm: bytes


@dataclass(frozen=True, slots=True)
class TranscriptDelta:
    response_id: str
    text: str


@dataclass(frozen=True, slots=True)
class ResponseDone:
    response_id: str
    status: str
    """``completed``, ``cancelled``, ``incomplete`` or ``failed``."""
    text: str
    usage: Usage | None


@dataclass(frozen=True, slots=True)
class ProviderError:
    code: str
    message: str


@dataclass(frozen=True, slots=True)
class Disconnected:
    reason: str
    by_client: bool


RealtimeEvent = (
    SpeechStarted
    | SpeechStopped
    | InputCommitted
    | InputTranscript
    | ResponseStarted
    | OutputItem
    | ItemTruncated
    | AudioDelta
    | TranscriptDelta
    | ResponseDone
    | ProviderError
    | Disconnected
)

AudioFormat = Literal["pcm16"]


class RealtimeConnection(Protocol):
    """One open, acknowledged session."""

    async def append_audio(self, pcm: bytes) -> None: ...

    async def commit(self) -> None: ...

    async def send_text(self, text: str) -> None: ...

    async def add_item(self, role: Role, text: str) -> None:
        """Add a completed message to the conversation (no response is asked for)."""

    async def create_response(self) -> None: ...

    async def cancel_response(self) -> None: ...

    async def truncate(self, item_id: str, audio_end_ms: int) -> None:
        """Barge-in: the participant heard ``item_id`` only up to ``audio_end_ms``."""

    def events(self) -> AsyncIterator[RealtimeEvent]: ...

    async def close(self) -> None: ...


class RealtimeProvider(Protocol):
    name: str
    limits: RealtimeLimits
    proactive_rollover: bool
    sample_rate: int
    """PCM16 mono sample rate of the session's input and output audio."""
    max_concurrent_sessions: int
    """Sessions the provider allows at once for one participant (2: a standby is possible)."""
    standby_idle_s: float | None
    """How long the provider keeps a session that receives nothing (None: no limit)."""

    async def connect(self, seed: SessionSeed) -> RealtimeConnection: ...
