"""Participant context (docs/context.md): the pure engine the context actors run.

- ``clip``: UTF-8 sizes and start-and-end clipping that never splits a character.
- ``render``: the rendered text of every block kind and the merge of a participant's
  sections into prompt order.
- ``compaction``: compaction requests and results, prompts with limit and format.
- ``engine``: one section's state machine (entries, rolling summary, budgets,
  compaction snapshots, the Situation/Handling table, rendering).
- ``config``: validation of the ContextManager's constructor arguments.

The actors around it (thin shells, see docs/design.md "Context as actors"):

- ``messages``: the bus messages and topics between the context actors.
- ``plan``: ``ContextPlan``, what every process of one deployment agrees on.
- ``sections``: the dialogue actor per participant and the actor per context topic.
- ``workers``: the compaction-worker pool that calls the model.
- ``replica``: the manager's local, never half-updated copy of the section views.
- ``store``: the journal of one section host (SQLite, WAL), a thin I/O shell.
- ``dump``: the versioned dump format of ``dump()``/``load()`` (docs/tools.md).
- ``manual``: the outcomes of a manual ``compact()`` (docs/tools.md).
- ``manager``: ``ContextManager``, the SDK's facade.
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
from .dump import ContextDump, decode_dump, encode_dump
from .manager import ContextManager, ContextSubscriber
from .manual import CompactOutcome, CompactStatus, SectionOutcome
from .messages import ContextTopics
from .plan import ContextPlan, context_plan
from .render import DIALOGUE_SECTION, render_participant
from .sections import ContextHost, register_sections
from .store import SCHEMA_VERSION, ContextStore, StoreError, open_store
from .workers import CompactionWorker, register_workers

__all__ = [
    "DEFAULT_COMPACTION_INPUT_BUDGET_BYTES",
    "DEFAULT_DIALOGUE_BUDGET_BYTES",
    "DEFAULT_TOPIC_BUDGET_BYTES",
    "DIALOGUE_SECTION",
    "OMISSION_MARKER",
    "SCHEMA_VERSION",
    "ApplyStatus",
    "CompactOutcome",
    "CompactStatus",
    "ContextDump",
    "ContextHost",
    "ContextStore",
    "CompactionRequest",
    "CompactionResult",
    "CompactionSettings",
    "CompactionWorker",
    "ContextConfig",
    "ContextManager",
    "ContextPlan",
    "ContextSubscriber",
    "ContextTopics",
    "Entry",
    "JobRef",
    "OverBudget",
    "RenderedSection",
    "Section",
    "SectionSpec",
    "SectionOutcome",
    "SectionState",
    "StoreError",
    "clip_middle",
    "context_config",
    "context_plan",
    "decode_dump",
    "encode_dump",
    "open_store",
    "register_sections",
    "register_workers",
    "render_participant",
    "utf8_size",
]
