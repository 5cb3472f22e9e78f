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
- ``sections``: ``register_sections``, hosting the section actors in a runtime.
- ``section_actors``: the dialogue actor per participant and the actor per context topic.
- ``section_host``: ``SectionHost``, the engine's loop inside a section actor, composed of
  ``section_residency`` (memory or journal), ``section_jobs`` (compaction jobs at the
  workers), ``section_publication`` (views after the journal commit) and
  ``section_records``.
- ``context_host``: ``ContextHost``, one section host's recovery and snapshots.
- ``shard_migration``: dialogues moved to the shard that owns them.
- ``workers``: the compaction-worker pool that calls the model.
- ``replica``: the manager's local, never half-updated copy of the section views.
- ``store``: opening the journal of one section host (SQLite, WAL): schema, versions,
  corrupt files.
- ``journal``: ``ContextStore``, the journal the section actors write through, a thin
  I/O shell (one transaction per loop turn, on a writer thread).
- ``journal_rows``: decoding the journal's rows, and the quarantine of unreadable ones.
- ``dump``: the versioned dump format of ``dump()``/``load()`` (docs/tools.md).
- ``manual``: the outcomes of a manual ``compact()`` (docs/tools.md).
- ``manager``: ``ContextManager``, the SDK's facade.

The names below are loaded on first use (PEP 562, ``xrmq.actors._lazy``): importing the
pure core (``xrmq.actors.context.engine``) or one of its names does not load the actors
around it, nor ZeroMQ and the runtime they need.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from xrmq.actors._lazy import lazy_exports

if TYPE_CHECKING:  # the same names, typed, for type checkers
    from .clip import OMISSION_MARKER, clip_middle, utf8_size
    from .compaction import CompactionRequest, CompactionResult, JobRef
    from .config import (
        DEFAULT_COMPACTION_INPUT_BUDGET_BYTES,
        DEFAULT_DIALOGUE_BUDGET_BYTES,
        DEFAULT_TOPIC_BUDGET_BYTES,
        ContextConfig,
        ContextOptions,
        context_config,
        context_options,
    )
    from .context_host import ContextHost
    from .dump import ContextDump, decode_dump, encode_dump
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
    from .journal import ContextStore
    from .manager import ContextManager, ContextSubscriber
    from .manual import CompactOutcome, CompactStatus, SectionOutcome
    from .messages import ContextTopics
    from .plan import ContextPlan, context_plan
    from .render import DIALOGUE_SECTION, render_participant
    from .sections import register_sections
    from .store import SCHEMA_VERSION, StoreError, open_store
    from .workers import CompactionWorker, register_workers

_EXPORTS = {
    "OMISSION_MARKER": ".clip",
    "clip_middle": ".clip",
    "utf8_size": ".clip",
    "CompactionRequest": ".compaction",
    "CompactionResult": ".compaction",
    "JobRef": ".compaction",
    "DEFAULT_COMPACTION_INPUT_BUDGET_BYTES": ".config",
    "DEFAULT_DIALOGUE_BUDGET_BYTES": ".config",
    "DEFAULT_TOPIC_BUDGET_BYTES": ".config",
    "ContextConfig": ".config",
    "ContextOptions": ".config",
    "context_config": ".config",
    "context_options": ".config",
    "ApplyStatus": ".engine",
    "CompactionSettings": ".engine",
    "Entry": ".engine",
    "OverBudget": ".engine",
    "RenderedSection": ".engine",
    "Section": ".engine",
    "SectionSpec": ".engine",
    "SectionState": ".engine",
    "ContextDump": ".dump",
    "decode_dump": ".dump",
    "encode_dump": ".dump",
    "ContextManager": ".manager",
    "ContextSubscriber": ".manager",
    "CompactOutcome": ".manual",
    "CompactStatus": ".manual",
    "SectionOutcome": ".manual",
    "ContextTopics": ".messages",
    "ContextPlan": ".plan",
    "context_plan": ".plan",
    "DIALOGUE_SECTION": ".render",
    "render_participant": ".render",
    "ContextHost": ".context_host",
    "register_sections": ".sections",
    "SCHEMA_VERSION": ".store",
    "ContextStore": ".journal",
    "StoreError": ".store",
    "open_store": ".store",
    "CompactionWorker": ".workers",
    "register_workers": ".workers",
}

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
    "CompactionRequest",
    "CompactionResult",
    "CompactionSettings",
    "CompactionWorker",
    "ContextConfig",
    "ContextDump",
    "ContextHost",
    "ContextManager",
    "ContextOptions",
    "ContextPlan",
    "ContextStore",
    "ContextSubscriber",
    "ContextTopics",
    "Entry",
    "JobRef",
    "OverBudget",
    "RenderedSection",
    "Section",
    "SectionOutcome",
    "SectionSpec",
    "SectionState",
    "StoreError",
    "clip_middle",
    "context_config",
    "context_options",
    "context_plan",
    "decode_dump",
    "encode_dump",
    "open_store",
    "register_sections",
    "register_workers",
    "render_participant",
    "utf8_size",
]

__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS)
