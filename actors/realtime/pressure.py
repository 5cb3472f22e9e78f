"""Context pressure of a realtime session, as a pure tracker.

Why a tracker of its own: the remote session holds the conversation, so the only way
to know how full it is is what the provider reports (usage per response) and what the
client counts (turns, audio seconds). Providers limit different things, so each
adapter declares its :class:`RealtimeLimits` and the tracker normalizes them into one
number::

    context_pressure = max(used_tokens / max_context_tokens,
                           used_turns / max_audio_turns,
                           used_audio_seconds / max_audio_duration_s)

over the limits that are declared (``None`` is "no such limit").

Rules:

* ``used_tokens`` is the **latest** completed response's ``input_tokens +
  output_tokens``. Input tokens are never summed across responses: a response's input
  already holds the whole conversation so far.
* A response without usage is estimated from the local transcript (seeded items plus
  every transcript line since the session started, ``estimate_tokens``), so the trigger
  still works with providers that report nothing.
* Turns and audio seconds are counted by the client.
* Session duration (``max_session_s``) only *schedules* a reconnect
  (:meth:`PressureTracker.session_expiring`): an old session is not a full one, so it
  never triggers summarization by itself.
* ``compress_at`` (0.70) starts the background checkpoint; ``rollover_at`` (0.85) is
  the pressure by which the rollover is scheduled; ``prepare_at`` (between them, by
  default halfway) opens the standby session that the rollover switches to (where the
  provider allows a second session at once). All configurable.

Nothing here sleeps, logs or does I/O; time is passed in (monotonic seconds).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

CHARS_PER_TOKEN = 4.0
"""The transcript estimate: about four characters of English text per token."""


LIFETIME = "session_lifetime"
"""The reconnect reason of a session whose ``max_session_s`` is nearly over."""


def estimate_tokens(text: str) -> int:
    """Tokens of ``text`` as the transcript estimate counts them (at least 1 for any text)."""
    return 0 if not text else max(1, round(len(text) / CHARS_PER_TOKEN))


@dataclass(frozen=True, slots=True)
class RealtimeLimits:
    """The limits a provider adapter declares for one session; ``None``: no such limit."""

    max_context_tokens: int | None = None
    max_audio_turns: int | None = None
    max_audio_duration_s: float | None = None
    max_session_s: float | None = None
    """Wall-clock lifetime of a session: schedules a reconnect, never a summary."""

    def __post_init__(self) -> None:
        for name in (
            "max_context_tokens",
            "max_audio_turns",
            "max_audio_duration_s",
            "max_session_s",
        ):
            value = getattr(self, name)
            if value is not None and not value > 0:
                raise ValueError(f"RealtimeLimits.{name}: must be positive or None")


@dataclass(frozen=True, slots=True)
class PressurePolicy:
    """When to start the background checkpoint and by when to roll over."""

    compress_at: float = 0.70
    rollover_at: float = 0.85
    session_margin_s: float = 30.0
    """How long before ``max_session_s`` the duration schedules a reconnect."""
    prepare_at: float | None = None
    """Pressure from which the standby session is opened; None: halfway between
    ``compress_at`` and ``rollover_at``."""

    def __post_init__(self) -> None:
        if not 0 < self.compress_at <= self.rollover_at <= 1:
            raise ValueError(
                "PressurePolicy: need 0 < compress_at <= rollover_at <= 1, got "
                f"compress_at={self.compress_at}, rollover_at={self.rollover_at}"
            )
        if self.prepare_at is not None and not (
            self.compress_at <= self.prepare_at <= self.rollover_at
        ):
            raise ValueError(
                "PressurePolicy.prepare_at: must be between compress_at and rollover_at "
                f"({self.compress_at:g}..{self.rollover_at:g}), got {self.prepare_at:g}"
            )
        if not self.session_margin_s >= 0:
            raise ValueError("PressurePolicy.session_margin_s: must be >= 0")


@dataclass(frozen=True, slots=True)
class Usage:
    """A completed response's token usage as the provider reported it."""

    input_tokens: int
    output_tokens: int

    def __post_init__(self) -> None:
        if self.input_tokens < 0 or self.output_tokens < 0:
            raise ValueError("Usage: input_tokens and output_tokens must be >= 0")

    @property
    def total(self) -> int:
        return self.input_tokens + self.output_tokens


def usage_from_openai(usage: object) -> Usage | None:
    """A ``response.done`` usage map (OpenAI Realtime) as :class:`Usage`; ``None`` if absent.

    ``total_tokens`` is used only when the split is missing; any malformed map is
    ``None`` (the transcript estimate applies).
    """
    if not isinstance(usage, dict):
        return None
    inp, out = usage.get("input_tokens"), usage.get("output_tokens")
    if isinstance(inp, int) and isinstance(out, int) and inp >= 0 and out >= 0:
        return Usage(inp, out)
    total = usage.get("total_tokens")
    if isinstance(total, int) and total >= 0:
        return Usage(total, 0)
    return None


Dimension = Literal["tokens", "turns", "audio_seconds"]


@dataclass(frozen=True, slots=True)
class Pressure:
    """The pressure now, which dimension sets it, and the figures behind it."""

    value: float
    dimension: Dimension | None
    used_tokens: int
    tokens_estimated: bool
    used_turns: int
    used_audio_s: float


class PressureTracker:
    """Usage of one session (one epoch): feed it, read :meth:`pressure`."""

    def __init__(
        self,
        limits: RealtimeLimits,
        policy: PressurePolicy | None = None,
        *,
        started_at: float = 0.0,
        seeded_text: str = "",
    ) -> None:
        self.limits = limits
        self.policy = PressurePolicy() if policy is None else policy
        self.started_at = started_at
        self.used_turns = 0
        self.used_audio_s = 0.0
        self._reported: int | None = None
        self._estimate = estimate_tokens(seeded_text)
        self._estimated = True

    def add_audio(self, seconds: float) -> None:
        """Input audio sent to the session."""
        if seconds > 0:
            self.used_audio_s += seconds

    def add_turn(self) -> None:
        """A user audio turn was committed."""
        self.used_turns += 1

    def add_transcript(self, text: str) -> None:
        """A transcript line (user or assistant) the session now holds, for the estimate."""
        self._estimate += estimate_tokens(text)

    def response_done(self, usage: Usage | None) -> None:
        """A completed response: its usage replaces the token count (never added to it)."""
        if usage is None:
            self._estimated = True
            return
        self._reported = usage.total
        self._estimated = False

    @property
    def prepare_threshold(self) -> float:
        policy = self.policy
        if policy.prepare_at is not None:
            return policy.prepare_at
        return (policy.compress_at + policy.rollover_at) / 2

    @property
    def used_tokens(self) -> int:
        if self._estimated or self._reported is None:
            return max(self._estimate, self._reported or 0)
        return self._reported

    def pressure(self) -> Pressure:
        ratios: list[tuple[float, Dimension]] = []
        limits = self.limits
        if limits.max_context_tokens is not None:
            ratios.append((self.used_tokens / limits.max_context_tokens, "tokens"))
        if limits.max_audio_turns is not None:
            ratios.append((self.used_turns / limits.max_audio_turns, "turns"))
        if limits.max_audio_duration_s is not None:
            ratios.append((self.used_audio_s / limits.max_audio_duration_s, "audio_seconds"))
        value, dimension = max(ratios, default=(0.0, None), key=lambda pair: pair[0])
        return Pressure(
            value, dimension, self.used_tokens, self._estimated, self.used_turns, self.used_audio_s
        )

    def should_prepare(self) -> bool:
        """Whether the standby session for the coming rollover should be open by now."""
        return self.pressure().value >= self.prepare_threshold

    def should_compress(self) -> bool:
        return self.pressure().value >= self.policy.compress_at

    def should_rollover(self) -> bool:
        return self.pressure().value >= self.policy.rollover_at

    def needs_summary(self, reason: str) -> bool:
        """Whether a reconnect for ``reason`` first summarizes: any reason but the
        session's lifetime does; the lifetime only when the pressure reached
        ``compress_at`` (a session that is old but not full reconnects verbatim)."""
        return reason != LIFETIME or self.should_compress()

    def session_expiring(self, now: float) -> bool:
        """Whether the session's lifetime schedules a reconnect (never a summary)."""
        max_s = self.limits.max_session_s
        return max_s is not None and now - self.started_at >= max_s - self.policy.session_margin_s
