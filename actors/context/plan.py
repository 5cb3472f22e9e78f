"""The context's one settings type: ``ContextPlan``, what every process of a deployment
agrees on (docs/context.md).

The ContextManager's keyword arguments (topics, budgets, prompts, summary guards) and the
deployment's (namespace, worker pool, timeouts, section hosts, retirement) are the fields
of one frozen msgspec Struct, their bounds stated once as ``msgspec.Meta`` on the field
types (``Budget``, ``Count``, ``Seconds``). ``context_plan(**kwargs)`` checks them; the
manager, the processes hosting section actors and those hosting compaction workers are
all built from the same checked plan. The edge box's ``[context]`` table
(``config.ContextTable``) decodes with the same ``Budget`` and builds the same plan.

What the settings define is derived, never stored beside them: ``plan.config`` is the
sections (``ContextSections``: the engine's ``Section`` of the dialogue and of each
topic), ``plan.topics`` the deployment's internal bus topics (``ContextTopics``).

Every rule raises ``ValueError`` naming the parameter and the rule, built from the field's
type and Meta (``xrmq.actors.explain``), so a misconfigured manager fails at construction
rather than when the first update or compaction arrives.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from functools import cached_property
from typing import Annotated, Any

import msgspec

from xrmq.actors.explain import explain
from xrmq.schemas import CompactionPrompts
from xrmq.topics import Topic

from .engine import Section
from .messages import CompactionDone, ContextTopics
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


class ContextPlan(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True, dict=True):
    """A context deployment's settings: the sections' and the deployment's.

    Build one with ``context_plan(**kwargs)``, which checks every field against its type
    and Meta and the rules across fields; a ``ContextPlan`` made directly is not checked
    (msgspec validates on decode and convert, not on construction). Equal settings are
    equal plans; the sections are built once per plan (``config``, cached in the
    instance dict the Struct is declared with).

    - ``namespace`` prefixes every internal topic (``messages.ContextTopics``).
    - ``compaction_workers`` is the size of the worker pool: workers ``0..n-1``, each
      its own actor and mailbox, possibly in different processes.
    - ``worker_concurrency`` bounds the model calls one worker runs at once.
    - ``compaction_timeout_s``: a job without a result by then is sent to the next
      worker (its entries stay meanwhile); after every worker was tried it fails and is
      retried after the section's next entry.
    - ``control_timeout_s`` bounds each clear/cancel round trip of ``clear``/``close``.
    - ``section_hosts``: how many processes (shards) host section actors; host ``i``
      owns dialogue shard ``i`` and answers a replica's resync on its own topics.
    - ``retire_idle_s`` and ``max_resident_participants``: with a journal, a topic
      section keeps in memory only the participants used within ``retire_idle_s`` and
      at most ``max_resident_participants`` of them (least recently used retired
      first); a retired participant lives in the journal alone and is loaded back on
      its next write, fetch, load, compaction or clear (``sections.SectionHost``).
    """

    summary_context_topics: tuple[str, ...] = ()
    incremental_context_topics: tuple[str, ...] = ()
    dialogue_budget_bytes: Budget = DEFAULT_DIALOGUE_BUDGET_BYTES
    topic_budget_bytes: Budget | dict[str, Budget] = DEFAULT_TOPIC_BUDGET_BYTES
    """One budget for every topic, or one per configured topic."""
    compaction_input_budget_bytes: Budget = DEFAULT_COMPACTION_INPUT_BUDGET_BYTES
    compaction_prompts: CompactionPrompts | None = None
    summary_guards: bool = True
    """Check every model summary before it replaces entries, never resend a failed request
    unchanged, and fall back to the extractive summariser (``CompactionSettings.guarded``).
    On by default: a weak model must not be able to make a box's values disappear."""
    namespace: Namespace = DEFAULT_NAMESPACE
    compaction_workers: Count = DEFAULT_COMPACTION_WORKERS
    worker_concurrency: Count = DEFAULT_WORKER_CONCURRENCY
    compaction_timeout_s: Seconds = DEFAULT_COMPACTION_TIMEOUT_S
    control_timeout_s: Seconds = DEFAULT_CONTROL_TIMEOUT_S
    section_hosts: Count = 1
    retire_idle_s: IdleSeconds = DEFAULT_RETIRE_IDLE_S
    max_resident_participants: Resident = DEFAULT_MAX_RESIDENT_PARTICIPANTS

    @cached_property
    def config(self) -> ContextSections:
        """The sections these settings define (made once per plan)."""
        prompts = self.compaction_prompts or CompactionPrompts()
        settings = CompactionSettings(
            self.compaction_input_budget_bytes, prompts, guarded=self.summary_guards
        )
        budgets = self.topic_budget_bytes

        def budget(name: str) -> int:
            return budgets[name] if isinstance(budgets, dict) else budgets

        kinds: list[tuple[str, SectionKind]] = [
            (name, "summary") for name in self.summary_context_topics
        ]
        kinds += [(name, "incremental") for name in self.incremental_context_topics]
        return ContextSections(
            dialogue=Section(
                SectionSpec(DIALOGUE_SECTION, "dialogue", self.dialogue_budget_bytes), settings
            ),
            topics=tuple(
                Section(SectionSpec(name, kind, budget(name)), settings) for name, kind in kinds
            ),
        )

    @property
    def topics(self) -> ContextTopics:
        """The deployment's internal bus topics, under ``namespace``."""
        return ContextTopics(self.namespace)

    def result_topics(self) -> dict[str, Topic[CompactionDone]]:
        """Every compaction result topic of this deployment, by name
        (``ContextTopics.result_topics``)."""
        return self.topics.result_topics(section.spec.name for section in self.config.topics)


class ContextSections(msgspec.Struct, frozen=True):
    """The sections a ``ContextPlan`` defines (``plan.config``): the engine's ``Section``
    of the dialogue and of each configured topic."""

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


_FIELD_TYPES: dict[str, Any] = {
    field.name: field.type for field in msgspec.structs.fields(ContextPlan)
}


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


def context_plan(**kwargs: Any) -> ContextPlan:
    """Check a context deployment given as keyword arguments (``ContextPlan``'s fields:
    the ContextManager's names and defaults); ``ValueError`` naming the parameter and the rule.

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
    options = ContextPlan(**values)
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
