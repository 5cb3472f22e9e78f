"""Validation of the ContextManager's constructor arguments (docs/context.md), as a pure function.

The facade calls ``context_config`` once; every rule raises ``ValueError`` naming the
parameter and the rule, so a misconfigured manager fails at construction rather than
when the first update or compaction arrives.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import msgspec

from xrmq.schemas import CompactionPrompts

from .engine import (
    INPUT_BUDGET_MARGIN_BYTES,
    CompactionSettings,
    Section,
    SectionKind,
    SectionSpec,
    min_input_budget,
)
from .render import DIALOGUE_SECTION

DEFAULT_DIALOGUE_BUDGET_BYTES = 8_000
DEFAULT_TOPIC_BUDGET_BYTES = 4_000
DEFAULT_COMPACTION_INPUT_BUDGET_BYTES = 12_000


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
                    raise ValueError(f"mode: topic {source!r} is configured as {section.spec.kind}, not {mode!r}")
                return section
        raise ValueError(f"source: {source!r} is not a configured topic")


def _budget(value: object, parameter: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
        raise ValueError(f"{parameter}: must be a positive int of bytes, got {value!r}")
    return value


def _topic_names(value: object, parameter: str) -> tuple[str, ...]:
    if isinstance(value, str) or not isinstance(value, Sequence):
        raise ValueError(f"{parameter}: must be a sequence of topic names, not {type(value).__name__}")
    names = tuple(value)
    for name in names:
        if not isinstance(name, str) or not name:
            raise ValueError(f"{parameter}: topic names must be non-empty strings, got {name!r}")
    seen: set[str] = set()
    for name in names:
        if name in seen:
            raise ValueError(f"{parameter}: topic names must be unique; {name!r} appears more than once")
        seen.add(name)
    return names


def context_config(
    *,
    summary_context_topics: Sequence[str] = (),
    incremental_context_topics: Sequence[str] = (),
    dialogue_budget_bytes: int = DEFAULT_DIALOGUE_BUDGET_BYTES,
    topic_budget_bytes: int | Mapping[str, int] = DEFAULT_TOPIC_BUDGET_BYTES,
    compaction_input_budget_bytes: int = DEFAULT_COMPACTION_INPUT_BUDGET_BYTES,
    compaction_prompts: CompactionPrompts | None = None,
) -> ContextConfig:
    """Validate the ContextManager's arguments (same names and defaults) into a config.

    Rules (docs/context.md): all budgets are positive; topic lists hold non-empty names, unique
    within and across both lists; a per-topic budget mapping has a value for every
    configured topic (and names no other); the compaction input budget is at least half
    the largest section budget plus 256 bytes.
    """
    summary = _topic_names(summary_context_topics, "summary_context_topics")
    incremental = _topic_names(incremental_context_topics, "incremental_context_topics")
    for name in incremental:
        if name in summary:
            raise ValueError(
                f"incremental_context_topics: topic names must be unique across both lists; "
                f"{name!r} is also a summary topic"
            )
    dialogue_budget = _budget(dialogue_budget_bytes, "dialogue_budget_bytes")
    topics = (*summary, *incremental)
    if isinstance(topic_budget_bytes, Mapping):
        missing = [name for name in topics if name not in topic_budget_bytes]
        if missing:
            raise ValueError(f"topic_budget_bytes: must have a value for every configured topic; missing {missing}")
        unknown = sorted(str(name) for name in topic_budget_bytes if name not in topics)
        if unknown:
            raise ValueError(f"topic_budget_bytes: names topics that are not configured: {unknown}")
        budgets = {name: _budget(topic_budget_bytes[name], f"topic_budget_bytes[{name!r}]") for name in topics}
    else:
        shared = _budget(topic_budget_bytes, "topic_budget_bytes")
        budgets = {name: shared for name in topics}
    input_budget = _budget(compaction_input_budget_bytes, "compaction_input_budget_bytes")
    largest = max((dialogue_budget, *budgets.values()))
    if input_budget < min_input_budget(largest):
        raise ValueError(
            "compaction_input_budget_bytes: must be at least half the largest section budget plus "
            f"{INPUT_BUDGET_MARGIN_BYTES} bytes (>= {min_input_budget(largest)} for a largest budget of {largest})"
        )
    if compaction_prompts is None:
        compaction_prompts = CompactionPrompts()
    elif not isinstance(compaction_prompts, CompactionPrompts):
        raise ValueError("compaction_prompts: must be a CompactionPrompts or None")
    settings = CompactionSettings(input_budget, compaction_prompts)
    kinds: list[tuple[str, SectionKind]] = [(name, "summary") for name in summary]
    kinds += [(name, "incremental") for name in incremental]
    return ContextConfig(
        dialogue=Section(SectionSpec(DIALOGUE_SECTION, "dialogue", dialogue_budget), settings),
        topics=tuple(Section(SectionSpec(name, kind, budgets[name]), settings) for name, kind in kinds),
    )
