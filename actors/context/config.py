"""The ``[context]`` table of an edge box's config: the context settings in the TOML's shape.

A config file names its topics as a table (``[context.topics.notes] mode = "incremental"``,
with an optional per-topic budget) and its prompts as a table, and adds the box's
journal keys (``persist``, ``state_dir``, ``on_corrupt``) and retirement; the
ContextManager takes the same settings as keyword arguments. ``ContextTable`` is that
table, decoded by the box's config (``xrmq.actors.edge.config``, which reports a bad key
with the file and the dotted key); ``manager_kwargs()`` and ``options()`` turn it into the
context's one settings type (``plan.ContextPlan``). Its budgets are typed with the plan's
``Budget``, so a TOML file is held to the same rule when it is decoded.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

import msgspec

from xrmq.schemas import CompactionPrompts

from .plan import (
    DEFAULT_COMPACTION_INPUT_BUDGET_BYTES,
    DEFAULT_DIALOGUE_BUDGET_BYTES,
    DEFAULT_MAX_RESIDENT_PARTICIPANTS,
    DEFAULT_RETIRE_IDLE_S,
    DEFAULT_TOPIC_BUDGET_BYTES,
    Budget,
    ContextPlan,
    context_plan,
)

TopicMode = Annotated[
    Literal["summary", "incremental"], msgspec.Meta(description="'summary' or 'incremental'")
]
"""A topic's ``mode``: an update replaces its state, or appends and is compacted."""
CorruptJournal = Annotated[
    Literal["error", "backup_and_start_empty"],
    msgspec.Meta(description="'error' or 'backup_and_start_empty'"),
]
"""What a context process does with a journal it cannot read (``store.OnCorrupt``)."""


class _Table(msgspec.Struct, frozen=True, forbid_unknown_fields=True, kw_only=True):
    """Base of the context's tables: misspelled keys are errors, fields are keyword-only."""


class TopicTable(_Table, frozen=True):
    """``[context.topics.NAME]``: one context topic."""

    mode: TopicMode
    """``summary`` (an update replaces the topic's state) or ``incremental`` (updates append and are
    compacted)."""
    budget_bytes: Budget | None = None
    """This topic's budget; None uses ``context.topic_budget_bytes``."""


class PromptsTable(_Table, frozen=True):
    """``[context.prompts]``: the compaction prompts to use instead of the defaults."""

    source: str | None = None
    dialogue: str | None = None
    condense: str | None = None

    def prompts(self) -> CompactionPrompts:
        """The ``CompactionPrompts`` with the defaults for every prompt not given."""
        given = {
            name: value
            for name in ("source", "dialogue", "condense")
            if (value := getattr(self, name)) is not None
        }
        return CompactionPrompts(**given)


class ContextTable(_Table, frozen=True):
    """``[context]``: the context of an edge box, in the TOML's shape."""

    topics: dict[str, TopicTable] = {}
    """Context topics by name, in the order their summaries are rendered."""
    dialogue_budget_bytes: Budget = DEFAULT_DIALOGUE_BUDGET_BYTES
    topic_budget_bytes: Budget = DEFAULT_TOPIC_BUDGET_BYTES
    """Budget of every topic that does not set its own ``budget_bytes``."""
    compaction_input_budget_bytes: Budget = DEFAULT_COMPACTION_INPUT_BUDGET_BYTES
    prompts: PromptsTable = PromptsTable()
    summary_guards: bool = True
    """Check every model summary, never resend a failed request unchanged, and fall back to
    the extractive summariser (docs/context.md, "Compaction", the guarded rows)."""
    persist: bool = True
    """Whether the context processes journal every section state (SQLite) and restore it
    after a restart."""
    state_dir: str | None = None
    """Where the journals live (one per context process); None: a per-bus directory
    under ``$XDG_STATE_HOME/xrmq``, else ``~/.local/state/xrmq``."""
    on_corrupt: CorruptJournal = "error"
    """A journal that cannot be read: ``error`` (the process does not start, naming the
    file) or ``backup_and_start_empty`` (moved aside, the process starts empty). A row
    that cannot be read in a journal that can is quarantined whatever this says
    (``xrmq.actors.context.store``): only its participant's section starts empty."""
    retire_idle_s: float = DEFAULT_RETIRE_IDLE_S
    """With ``persist``: a participant's topic section unused this long leaves the
    context process's memory for the journal alone (loaded back on its next use)."""
    max_resident_participants: int = DEFAULT_MAX_RESIDENT_PARTICIPANTS
    """With ``persist``: participants each topic section keeps in memory at most (the
    least recently used beyond it are retired to the journal)."""

    def options(self) -> ContextPlan:
        """The plan this table's section settings describe, the deployment's at their
        defaults (checked by ``context_plan``)."""
        return context_plan(**self.manager_kwargs())

    def manager_kwargs(self) -> dict[str, Any]:
        """The ``ContextManager`` constructor's keyword arguments this table describes (the
        section fields of ``ContextPlan``)."""
        return {
            "summary_context_topics": [
                name for name, topic in self.topics.items() if topic.mode == "summary"
            ],
            "incremental_context_topics": [
                name for name, topic in self.topics.items() if topic.mode == "incremental"
            ],
            "dialogue_budget_bytes": self.dialogue_budget_bytes,
            "topic_budget_bytes": {name: self.topic_budget(name) for name in self.topics},
            "compaction_input_budget_bytes": self.compaction_input_budget_bytes,
            "compaction_prompts": self.prompts.prompts(),
            "summary_guards": self.summary_guards,
        }

    def topic_budget(self, name: str) -> int:
        """A topic's own budget, else the table's ``topic_budget_bytes``."""
        budget = self.topics[name].budget_bytes
        return self.topic_budget_bytes if budget is None else budget
