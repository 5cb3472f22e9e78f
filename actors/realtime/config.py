"""``[destinations.NAME.realtime]``: the configuration of one realtime session.

The realtime capability owns the description of its session; the edge box's config
(``xrmq.actors.edge.config``) composes it into a ``kind = "realtime"`` destination and
decodes it with the rest of the file. Choices are ``Literal`` types, so msgspec refuses
a value outside them while decoding (``xrmq.actors.explain`` names the key and the
choices); ``REALTIME_RANGES`` bounds every number; ``realtime_problem`` states the
rules across keys.

Pure: msgspec and the rollover's policy types, no websockets.
"""

from __future__ import annotations

from typing import Annotated, Literal

import msgspec

from .rollover import OverflowPolicy, Policy

Provider = Literal["offline", "openai"]
AuthHeader = Literal["authorization", "api-key"]
BoundaryTimeout = Literal["natural", "keep"]
"""After ``boundary_wait_s`` with the user turn still open: let the checkpoint wait for the
next disconnect (``natural``) or keep waiting (``keep``)."""

Ratio = Annotated[float, msgspec.Meta(gt=0, le=1)]
"""A share of a limit: ``must be > 0 and <= 1``."""
_Count = Annotated[int, msgspec.Meta(ge=1)]
_NotNegative = Annotated[int, msgspec.Meta(ge=0)]
_Seconds = Annotated[float, msgspec.Meta(gt=0)]
_NotNegativeSeconds = Annotated[float, msgspec.Meta(ge=0)]


class RealtimeConfig(msgspec.Struct, frozen=True, forbid_unknown_fields=True, kw_only=True):
    """A ``kind = "realtime"`` destination's session (``RealtimeConversation``, docs in
    docs/realtime.md)."""

    provider: Provider = "offline"
    """``offline`` (the offline realtime server, started inside the destination's process on
    loopback) or ``openai`` (the OpenAI Realtime protocol at ``base_url``)."""
    base_url: str | None = None
    """For ``openai``: the ws:// or wss:// URL (None: OpenAI's); Azure and compatible servers."""
    model: str = "gpt-realtime"
    """For ``openai``: the realtime model (a query parameter unless ``base_url`` names one)."""
    api_key_env: str | None = None
    """For ``openai``: the variable holding the key, which must be set (None:
    ``$OPENAI_API_KEY`` when set, else no key: a local compatible server)."""
    auth_header: AuthHeader = "authorization"
    """For ``openai``: ``authorization`` (Bearer) or ``api-key`` (Azure)."""
    voice: str = "alloy"
    compress_at: Ratio = 0.70
    """Pressure from which the background checkpoint (summary + verbatim tail) starts."""
    rollover_at: Ratio = 0.85
    """Pressure by which the session is rolled over at the next safe boundary."""
    prepare_at: Ratio | None = None
    """Pressure from which the standby session the rollover switches to is opened
    (between ``compress_at`` and ``rollover_at``; None: halfway)."""
    max_concurrent_sessions: _Count | None = None
    """Sessions the provider allows at once (2: a standby before each rollover). For
    ``openai``: what the account allows (None: 1, no standby); for ``offline``: the
    server's limit (None: none)."""
    idle_s: _Seconds | None = None
    """How long the provider keeps a session that receives nothing (a waiting standby is
    reopened before it); for ``offline``, the server closes such a session. None: none."""
    max_context_tokens: _Count | None = None
    """The session limits pressure is measured against; None: the provider's (``openai``:
    32,000 tokens and 30 minutes), no such limit for the others."""
    max_audio_turns: _Count | None = None
    max_audio_duration_s: _Seconds | None = None
    max_session_s: _Seconds | None = None
    policy: Policy = "proactive"
    """``proactive`` (roll over at a safe boundary) or ``natural`` (keep the checkpoint for
    the next disconnect)."""
    backlog_items: _Count = 500
    """Input items (20 ms frames) buffered while a session is replaced."""
    overflow: OverflowPolicy = "drop_oldest"
    """A full backlog: ``drop_oldest`` or ``drop_newest`` (counted, logged)."""
    connect_attempts: _Count = 3
    keep_tail: _NotNegative = 4
    """Messages of the checkpoint kept verbatim after the summary."""
    boundary_wait_s: _Seconds = 20.0
    """How long a scheduled rollover waits for the participant's turn to end."""
    on_boundary_timeout: BoundaryTimeout = "natural"
    """After ``boundary_wait_s`` with the user turn still open: ``natural`` (the checkpoint
    waits for the next disconnect, counted, logged) or ``keep`` (keep waiting)."""
    connect_latency_s: _NotNegativeSeconds = 0.0
    """For ``offline``: the server's connect latency (a provider's is about 1.1 s)."""
    server_max_context_tokens: _Count | None = None
    """For ``offline``: the server's own context window (it truncates beyond it);
    None: ``max_context_tokens``."""


_SECONDS = (0.001, 3600)
_LONG_SECONDS = (0.001, 86_400)
_TOKENS = (1, 10_000_000)

REALTIME_RANGES: dict[str, tuple[float, float]] = {
    "compress_at": (0.01, 1),
    "rollover_at": (0.01, 1),
    "prepare_at": (0.01, 1),
    "max_concurrent_sessions": (1, 100),
    "idle_s": _LONG_SECONDS,
    "max_context_tokens": _TOKENS,
    "max_audio_turns": (1, 1_000_000),
    "max_audio_duration_s": _LONG_SECONDS,
    "max_session_s": _LONG_SECONDS,
    "backlog_items": (1, 1_000_000),
    "connect_attempts": (1, 100),
    "keep_tail": (0, 10_000),
    "boundary_wait_s": _SECONDS,
    "connect_latency_s": (0, 60),
    "server_max_context_tokens": _TOKENS,
}
"""The inclusive range of each number of the table, by field: a value its type allows can
still be absurd (a session of a year, a backlog of a billion frames)."""

_REMOTE_ONLY = ("base_url", "model", "api_key_env", "auth_header", "voice")
_OFFLINE_ONLY = ("connect_latency_s", "server_max_context_tokens")


def realtime_problem(realtime: RealtimeConfig) -> tuple[str, str] | None:
    """The first rule across the session's keys that ``realtime`` breaks, as ``(field,
    rule)``; None when it keeps them all (each value's own type and range are the decoder's).
    """
    if realtime.compress_at > realtime.rollover_at:
        return (
            "compress_at",
            f"must be <= rollover_at ({realtime.rollover_at:g}): the checkpoint is prepared "
            "before the rollover needs it",
        )
    prepare = realtime.prepare_at
    if prepare is not None and not realtime.compress_at <= prepare <= realtime.rollover_at:
        return (
            "prepare_at",
            f"must be between compress_at ({realtime.compress_at:g}) and rollover_at "
            f"({realtime.rollover_at:g}): the standby opens after the checkpoint starts",
        )
    default = RealtimeConfig()
    if realtime.provider == "offline":
        for field in _REMOTE_ONLY:
            if getattr(realtime, field) != getattr(default, field):
                return field, 'only for provider = "openai" (a remote session)'
        return None
    for field in _OFFLINE_ONLY:
        if getattr(realtime, field) != getattr(default, field):
            return field, 'only for provider = "offline" (the offline server)'
    url = realtime.base_url
    if url is not None and not url.startswith(("ws://", "wss://")):
        return "base_url", f"must be a ws:// or wss:// URL, got {url!r}"
    if realtime.api_key_env is not None and not realtime.api_key_env.strip():
        return "api_key_env", "must name a variable (or be left out)"
    return None
