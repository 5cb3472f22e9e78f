"""What a destination measured of one turn: its model stages and usage (``schemas/turns.py``
has the whole record). Returned inside ``DestinationResult``, so it reaches the router with
the result, across processes too."""

from __future__ import annotations

import msgspec


class TurnUsage(msgspec.Struct, frozen=True, omit_defaults=True):
    """A model call's token counts and cost. ``estimated``: the provider reported none, so
    the counts are estimated from the text (about four characters a token); ``cost_usd``
    is present only when the model's price is known (litellm's price table)."""

    prompt_tokens: int | None = None
    completion_tokens: int | None = None
    reasoning_tokens: int | None = None
    estimated: bool = False
    cost_usd: float | None = None


class ToolCallTime(msgspec.Struct, frozen=True, omit_defaults=True):
    """One tool call of the answer: the tool's name, when it was called and answered (Unix
    microseconds, the destination's clock), and whether it failed."""

    name: str
    started_us: int
    ended_us: int
    failed: bool = False


class CompactionTime(msgspec.Struct, frozen=True, omit_defaults=True):
    """One compaction the answer caused: ``kind`` (``tools``: the tools destination's
    automatic compaction of its transcript before a model call), how it ended
    (``outcome``: ``compacted``, ``nothing_to_condense``, ``summarize_failed``), its steps
    (tiers run), whether the transcript was still over its limit, and when it began and
    ended (Unix microseconds, the destination's clock)."""

    kind: str
    outcome: str
    started_us: int
    ended_us: int
    steps: int = 0
    still_over: bool = False


class SectionSize(msgspec.Struct, frozen=True):
    """One context section as the answer's request rendered it: its name, its rendered size
    and its budget (UTF-8 bytes)."""

    name: str
    bytes: int
    budget_bytes: int


class DestinationStages(msgspec.Struct, frozen=True, omit_defaults=True):
    """The stages a destination saw while answering, returned in its ``DestinationResult``.

    ``runtime``: the name of the runtime (process) whose clock took them; ``model``: the
    model that answered.
    """

    runtime: str | None = None
    model: str | None = None
    model_request_us: int | None = None
    first_token_us: int | None = None
    first_chunk_us: int | None = None
    usage: TurnUsage | None = None
    tool_calls: tuple[ToolCallTime, ...] = ()
    """The tool calls the answer made, in the order they ended (parallel calls overlap)."""
    context: tuple[SectionSize, ...] = ()
    """The context sections the request carried, in configured order (none: the destination's
    context does not report them)."""
    compactions: tuple[CompactionTime, ...] = ()
    """The compactions the answer ran, in order."""
