"""Participant context (docs/context.md): the pure engine the context actors run.

- ``clip``: UTF-8 sizes and start-and-end clipping that never splits a character.
- ``render``: the rendered text of every block kind and the merge of a participant's
  sections into prompt order.
- ``compaction``: compaction requests and results, prompts with limit and format.
- ``state``: what a section is and remembers (spec, settings, state, results) and the
  exchange identities.
- ``engine``: one section's operations (entries, rolling summary, budgets, compaction
  snapshots, the Situation/Handling table, rendering).
- ``plan``: ``ContextPlan``, the context's one settings type (the ContextManager's
  keyword arguments and the deployment's), checked by ``context_plan``; its sections
  (``plan.config``) and bus topics (``plan.topics``) are derived from it.
- ``config``: ``ContextTable``, the ``[context]`` table of an edge box's TOML, which
  builds the same plan.

The actors around it (thin shells, see docs/design.md "Context as actors"):

- ``messages``: the bus messages and topics between the context actors.
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
- ``hosting``: the runtime a manager is attached to, or the private one it starts.
- ``writes``: a manager's writes in flight and the callers waiting for them.
- ``replication``: a manager's replica of every participant's views, kept in step with
  the section hosts (resync after a restart, fetch after an eviction).
- ``subscriber``: ``ContextSubscriber``, the agent through which the replica hears the bus.
- ``operations``: the requests behind ``dump``, ``load`` and ``compact``.
- ``manager``: ``ContextManager``, the SDK's facade.

The names below are loaded on first use (PEP 562, ``xrmq.actors._lazy``): importing the
pure core (``xrmq.actors.context.engine``) or one of its names does not load the actors
around it, nor ZeroMQ and the runtime they need.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from xrmq.actors._lazy import lazy_exports

if TYPE_CHECKING:  # the same names, typed, for type checkers
    from .clip import OMISSION_MARKER, clip_middle, utf8_size
    from .compaction import CompactionRequest, CompactionResult, JobRef
    from .context_host import ContextHost
    from .dump import ContextDump, decode_dump, encode_dump
    from .engine import Section
    from .journal import ContextStore
    from .manager import ContextManager
    from .manual import CompactOutcome, CompactStatus, SectionOutcome
    from .messages import ContextTopics
    from .plan import (
        DEFAULT_COMPACTION_INPUT_BUDGET_BYTES,
        DEFAULT_DIALOGUE_BUDGET_BYTES,
        DEFAULT_TOPIC_BUDGET_BYTES,
        ContextPlan,
        ContextSections,
        context_plan,
    )
    from .plan import ContextPlan as ContextOptions
    from .plan import context_plan as context_options
    from .render import DIALOGUE_SECTION, render_participant
    from .sections import register_sections
    from .state import (
        ApplyStatus,
        CompactionSettings,
        Entry,
        OverBudget,
        RenderedSection,
        SectionSpec,
        SectionState,
    )
    from .store import SCHEMA_VERSION, StoreError, open_store
    from .subscriber import ContextSubscriber
    from .workers import CompactionWorker, register_workers

_EXPORTS = {
    "OMISSION_MARKER": ".clip",
    "clip_middle": ".clip",
    "utf8_size": ".clip",
    "CompactionRequest": ".compaction",
    "CompactionResult": ".compaction",
    "JobRef": ".compaction",
    "DEFAULT_COMPACTION_INPUT_BUDGET_BYTES": ".plan",
    "DEFAULT_DIALOGUE_BUDGET_BYTES": ".plan",
    "DEFAULT_TOPIC_BUDGET_BYTES": ".plan",
    "ApplyStatus": ".state",
    "CompactionSettings": ".state",
    "Entry": ".state",
    "OverBudget": ".state",
    "RenderedSection": ".state",
    "Section": ".engine",
    "SectionSpec": ".state",
    "SectionState": ".state",
    "ContextDump": ".dump",
    "decode_dump": ".dump",
    "encode_dump": ".dump",
    "ContextManager": ".manager",
    "ContextSubscriber": ".subscriber",
    "CompactOutcome": ".manual",
    "CompactStatus": ".manual",
    "SectionOutcome": ".manual",
    "ContextTopics": ".messages",
    "ContextPlan": ".plan",
    "ContextSections": ".plan",
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
    "ContextDump",
    "ContextHost",
    "ContextManager",
    "ContextOptions",
    "ContextPlan",
    "ContextSections",
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

_lazy_getattr, _lazy_dir = lazy_exports(__name__, _EXPORTS)

# Earlier spellings of the one settings type (``ContextPlan``), for code written against
# them (CHANGELOG, "Issue 36"): ``ContextOptions`` was the checked keyword arguments,
# ``ContextConfig`` the sections (now ``plan.config``).
_ALIASES = {"ContextOptions": "ContextPlan", "context_options": "context_plan"}


def __getattr__(name: str) -> Any:
    return _lazy_getattr(_ALIASES.get(name, name))


def __dir__() -> list[str]:
    return sorted({*_lazy_dir(), *_ALIASES})


def context_config(**kwargs: Any) -> ContextSections:
    """The sections ``context_plan(**kwargs)`` defines (its ``config``)."""
    from .plan import context_plan

    return context_plan(**kwargs).config


def config_of(plan: ContextPlan) -> ContextSections:
    """A checked plan's sections: ``plan.config``."""
    return plan.config


def plan_of(plan: ContextPlan) -> ContextPlan:
    """A checked plan is its own deployment (``ContextOptions`` and ``ContextPlan`` are one)."""
    return plan
