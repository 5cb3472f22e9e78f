"""Participant context (seeds 000 and 001): the pure engine the context actors run.

- ``clip``: UTF-8 sizes and start-and-end clipping that never splits a character.
- ``render``: the rendered text of every block kind and the merge of a participant's
  sections into prompt order.
- ``compaction``: compaction requests and results, prompts with limit and format.
- ``engine``: one section's state machine (entries, rolling summary, budgets,
  compaction snapshots, the Situation/Handling table, rendering).
- ``config``: validation of the ContextManager's constructor arguments.
"""

from .clip import OMISSION_MARKER, clip_middle, utf8_size
from .compaction import CompactionRequest, CompactionResult, JobRef
from .config import (
    DEFAULT_COMPACTION_INPUT_BUDGET_BYTES,
    DEFAULT_DIALOGUE_BUDGET_BYTES,
    DEFAULT_TOPIC_BUDGET_BYTES,
    ContextConfig,
    context_config,
)
from .engine import (
    ApplyStatus,
    CompactionSettings,
    Entry,
    OverBudget,
    RenderedSection,
    Section,
    SectionSpec,
    SectionState,
)
from .render import DIALOGUE_SECTION, render_participant

__all__ = [
    "DEFAULT_COMPACTION_INPUT_BUDGET_BYTES",
    "DEFAULT_DIALOGUE_BUDGET_BYTES",
    "DEFAULT_TOPIC_BUDGET_BYTES",
    "DIALOGUE_SECTION",
    "OMISSION_MARKER",
    "ApplyStatus",
    "CompactionRequest",
    "CompactionResult",
    "CompactionSettings",
    "ContextConfig",
    "Entry",
    "JobRef",
    "OverBudget",
    "RenderedSection",
    "Section",
    "SectionSpec",
    "SectionState",
    "clip_middle",
    "context_config",
    "render_participant",
    "utf8_size",
]
