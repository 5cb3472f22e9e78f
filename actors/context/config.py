"""The context configuration (docs/context.md): one type, its constraints, and their checks.

``ContextOptions`` is the one shape of a context configuration: the ContextManager's
keyword arguments (topics, budgets, prompts) and the deployment's (namespace, worker
pool, timeouts), with their bounds stated once as ``msgspec.Meta`` on the field types
(``Budget``, ``Count``, ``Seconds``). ``ContextManager(**kwargs)`` and
``context_plan(**kwargs)`` validate through ``context_options``; the edge config's
``[context]`` table types its budgets with the same ``Budget``, so a TOML file is held to
the same rule when it is decoded.

Every rule raises ``ValueError`` naming the parameter and the rule, built from the field's
type and Meta (``xrmq.actors.explain``), so a misconfigured manager fails at construction
rather than when the first update or compaction arrives.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Annotated, Any

import msgspec

from xrmq.actors.explain import explain
from xrmq.schemas import CompactionPrompts

from .engine import Section
from .render import DIALOGUE_SECTION
from .state import (
    INPUT_BUDGET_MARGIN_BYTES,
    CompactionSettings,
    SectionKind,
    SectionSpec,
    min_input_budget,
)

DEFAULT_DIALOGUE_BUDGET_BYTES = 8_000
DEFAULT_TOPIC_BUDGET_BYTES = 4_000
DEFAULT_COMPACTION_INPUT_BUDGET_BYTES = 12_000
DEFAULT_NAMESPACE = "context"
DEFAULT_COMPACTION_WORKERS = 2
DEFAULT_WORKER_CONCURRENCY = 4
DEFAULT_COMPACTION_TIMEOUT_S = 120.0
DEFAULT_CONTROL_TIMEOUT_S = 5.0
DEFAULT_RETIRE_IDLE_S = 600.0
DEFAULT_MAX_RESIDENT_PARTICIPANTS = 10_000

Budget = Annotated[int, msgspec.Meta(gt=0, description="a positive int of bytes")]
"""A section budget: UTF-8 bytes of rendered text."""
Count = Annotated[int, msgspec.Meta(ge=1, description="a positive int")]
"""A pool size or a number of processes."""
Seconds = Annotated[float, msgspec.Meta(gt=0, description="a positive number of seconds")]
"""A timeout (finite: checked beside the Meta, which cannot say so)."""
Namespace = Annotated[
    str,
    msgspec.Meta(min_length=1, pattern="^[^\\x00]*$", description="a non-empty string without NUL"),
]
"""The prefix of a deployment's internal topics (NUL ends a wire key's fields)."""
IdleSeconds = Annotated[
    float, msgspec.Meta(ge=1, le=86_400, description="a number of seconds from 1 to 86400")
]
"""How long a participant's section stays in memory unused before it is retired to the
journal."""
Resident = Annotated[
    int, msgspec.Meta(ge=1, le=10_000_000, description="an int from 1 to 10000000")
]
"""Participants a section host keeps in memory at most (the least recently used beyond
it are retired to the journal)."""


class ContextOptions(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """A context configuration: the ContextManager's and ``context_plan``'s keyword arguments.

    Build one with ``context_options(**kwargs)``, which checks every field against its
    type and Meta and the rules across fields; a ``ContextOptions`` made directly is not
    checked (msgspec validates on decode and convert, not on construction).
    """

    summary_context_topics: tuple[str, ...] = ()
    incremental_context_topics: tuple[str, ...] = ()
    dialogue_budget_bytes: Budget = DEFAULT_DIALOGUE_BUDGET_BYTES
    topic_budget_bytes: Budget | dict[str, Budget] = DEFAULT_TOPIC_BUDGET_BYTES
    """One budget for every topic, or one per configured topic."""
    compaction_input_budget_bytes: Budget = DEFAULT_COMPACTION_INPUT_BUDGET_BYTES
    compaction_prompts: CompactionPrompts | None = None
    summary_guards: bool = False
    """Check every model summary before it replaces entries, never resend a failed request
    unchanged, and fall back to the extractive summariser (``CompactionSettings.guarded``).
    Off by default for now: on, a summary that keeps too few of its entries' values is
    refused, which placeholder summaries in existing deployments' tests would be."""
    namespace: Namespace = DEFAULT_NAMESPACE
    compaction_workers: Count = DEFAULT_COMPACTION_WORKERS
    worker_concurrency: Count = DEFAULT_WORKER_CONCURRENCY
    compaction_timeout_s: Seconds = DEFAULT_COMPACTION_TIMEOUT_S
    control_timeout_s: Seconds = DEFAULT_CONTROL_TIMEOUT_S
    section_hosts: Count = 1
    retire_idle_s: IdleSeconds = DEFAULT_RETIRE_IDLE_S
    """With a journal: a participant unused this long is retired from a topic section's
    memory to the journal (loaded back on its next use)."""
    max_resident_participants: Resident = DEFAULT_MAX_RESIDENT_PARTICIPANTS
    """With a journal: participants a topic section keeps in memory at most; the least
    recently used beyond it are retired to the journal."""


SECTION_OPTIONS = (
    "summary_context_topics",
    "incremental_context_topics",
    "dialogue_budget_bytes",
    "topic_budget_bytes",
    "compaction_input_budget_bytes",
    "compaction_prompts",
    "summary_guards",
)
"""The ``ContextOptions`` fields that define the sections (``context_config``'s arguments)."""

_FIELD_TYPES: dict[str, Any] = {
    field.name: field.type for field in msgspec.structs.fields(ContextOptions)
}


class ContextConfig(msgspec.Struct, frozen=True):
    """A validated manager configuration and the sections it defines."""

    dialogue: Section
    topics: tuple[Section, ...]
    """Summary topics, then incremental topics, each in configured order."""

    @property
    def sections(self) -> tuple[Section, ...]:
        """Dialogue first, then the topics: the order ``render_participant`` shows summaries in."""
        return (self.dialogue, *self.topics)

    def topic_section(self, source: str, mode: str) -> Section:
        """The section for a topic update, checking the source and its configured mode."""
        for section in self.topics:
            if section.spec.name == source:
                if section.spec.kind != mode:
                    raise ValueError(
                        f"mode: topic {source!r} is configured as {section.spec.kind}, not {mode!r}"
                    )
                return section
        raise ValueError(f"source: {source!r} is not a configured topic")


def check_option(value: object, type_: Any, parameter: str) -> Any:
    """``value`` converted to ``type_`` (strictly: no bool for an int, no text for a number),
    else ``ValueError("<parameter>: <rule>")`` with the rule the type and its Meta state."""
    try:
        converted = msgspec.convert(value, type_, strict=True)
    except msgspec.ValidationError as error:
        problem = explain(value, type_, describe_kind=True)
        rule = problem.rule if problem is not None else str(error)
        raise ValueError(f"{parameter}: {rule}") from None
    if isinstance(converted, float) and not math.isfinite(converted):
        raise ValueError(f"{parameter}: must be a finite number, got {value!r}")
    return converted


def _budget(value: object, parameter: str) -> int:
    budget: int = check_option(value, Budget, parameter)
    return budget


def _topic_names(value: object, parameter: str) -> tuple[str, ...]:
    if isinstance(value, str) or not isinstance(value, Sequence):
        raise ValueError(
            f"{parameter}: must be a sequence of topic names, not {type(value).__name__}"
        )
    names = tuple(value)
    for name in names:
        if not isinstance(name, str) or not name:
            raise ValueError(f"{parameter}: topic names must be non-empty strings, got {name!r}")
    seen: set[str] = set()
    for name in names:
        if name in seen:
            raise ValueError(
                f"{parameter}: topic names must be unique; {name!r} appears more than once"
            )
        seen.add(name)
    return names


def context_options(**kwargs: Any) -> ContextOptions:
    """Check a context configuration given as keyword arguments (the ContextManager's and
    ``context_plan``'s names and defaults); ``ValueError`` naming the parameter and the rule.

    Rules (docs/context.md): all budgets are positive; topic lists hold non-empty names,
    unique within and across both lists; a per-topic budget mapping covers every configured
    topic (and names no other); the compaction input budget is at least half the largest
    section budget plus 256 bytes; pool sizes are >= 1 and timeouts positive and finite.
    """
    unknown = [name for name in kwargs if name not in _FIELD_TYPES]
    if unknown:
        raise TypeError(f"unexpected keyword argument {unknown[0]!r}")
    summary = _topic_names(kwargs.get("summary_context_topics", ()), "summary_context_topics")
    incremental = _topic_names(
        kwargs.get("incremental_context_topics", ()), "incremental_context_topics"
    )
    for name in incremental:
        if name in summary:
            raise ValueError(
                f"incremental_context_topics: topic names must be unique across both lists; "
                f"{name!r} is also a summary topic"
            )
    values: dict[str, Any] = {
        "summary_context_topics": summary,
        "incremental_context_topics": incremental,
    }
    topics = (*summary, *incremental)
    for name, value in kwargs.items():
        if name in values:
            continue
        if name == "topic_budget_bytes" and isinstance(value, Mapping):
            missing = [topic for topic in topics if topic not in value]
            if missing:
                raise ValueError(
                    "topic_budget_bytes: must have a value for every configured topic; "
                    f"missing {missing}"
                )
            extra = sorted(str(topic) for topic in value if topic not in topics)
            if extra:
                raise ValueError(
                    f"topic_budget_bytes: names topics that are not configured: {extra}"
                )
            values[name] = {
                topic: _budget(value[topic], f"topic_budget_bytes[{topic!r}]") for topic in topics
            }
        elif name == "topic_budget_bytes":
            values[name] = _budget(value, name)
        elif name == "compaction_prompts":
            if value is not None and not isinstance(value, CompactionPrompts):
                raise ValueError("compaction_prompts: must be a CompactionPrompts or None")
            values[name] = value
        else:
            values[name] = check_option(value, _FIELD_TYPES[name], name)
    options = ContextOptions(**values)
    budgets = options.topic_budget_bytes
    largest = max(
        (
            options.dialogue_budget_bytes,
            *(budgets.values() if isinstance(budgets, dict) else [budgets] * bool(topics)),
        )
    )
    input_budget = options.compaction_input_budget_bytes
    if input_budget < min_input_budget(largest):
        raise ValueError(
            "compaction_input_budget_bytes: must be at least half the largest section budget "
            f"plus {INPUT_BUDGET_MARGIN_BYTES} bytes (>= {min_input_budget(largest)} for a "
            f"largest budget of {largest})"
        )
    return options


def config_of(options: ContextOptions) -> ContextConfig:
    """The sections a checked ``ContextOptions`` defines."""
    prompts = options.compaction_prompts or CompactionPrompts()
    settings = CompactionSettings(
        options.compaction_input_budget_bytes, prompts, guarded=options.summary_guards
    )
    budgets = options.topic_budget_bytes

    def budget(name: str) -> int:
        return budgets[name] if isinstance(budgets, dict) else budgets

    kinds: list[tuple[str, SectionKind]] = [
        (name, "summary") for name in options.summary_context_topics
    ]
    kinds += [(name, "incremental") for name in options.incremental_context_topics]
    return ContextConfig(
        dialogue=Section(
            SectionSpec(DIALOGUE_SECTION, "dialogue", options.dialogue_budget_bytes), settings
        ),
        topics=tuple(
            Section(SectionSpec(name, kind, budget(name)), settings) for name, kind in kinds
        ),
    )


def context_config(
    *,
    summary_context_topics: Sequence[str] = (),
    incremental_context_topics: Sequence[str] = (),
    dialogue_budget_bytes: int = DEFAULT_DIALOGUE_BUDGET_BYTES,
    topic_budget_bytes: int | Mapping[str, int] = DEFAULT_TOPIC_BUDGET_BYTES,
    compaction_input_budget_bytes: int = DEFAULT_COMPACTION_INPUT_BUDGET_BYTES,
    compaction_prompts: CompactionPrompts | None = None,
    summary_guards: bool = False,
) -> ContextConfig:
    """Check the ContextManager's section arguments (same names and defaults) into the
    sections they define: ``config_of(context_options(...))``; the rules are
    ``context_options``'s."""
    return config_of(
        context_options(
            summary_context_topics=summary_context_topics,
            incremental_context_topics=incremental_context_topics,
            dialogue_budget_bytes=dialogue_budget_bytes,
            topic_budget_bytes=topic_budget_bytes,
            compaction_input_budget_bytes=compaction_input_budget_bytes,
            compaction_prompts=compaction_prompts,
            summary_guards=summary_guards,
        )
    )
