"""Moving dialogues to the shard that owns them after the shard count changed.

A journal written under another shard count holds participants its shard no longer
owns, and a shard count that went down leaves journals no process opens (orphans,
given to shard 0). Their dialogues are migrated once the host is ready: each is sent to
its owner (``dialogue_migrate``, merged there by exchange identity, so a repeat changes
nothing) and its rows are deleted here only once the owner answered, which it does
after journaling it; an owner not up yet is asked again every ``MIGRATION_RETRY_S``. An
orphan journal left empty is removed. A clear of a participant still waiting here drops
its dialogue instead (the owner answers the clear); one whose migration is on its way
when the clear comes is merged at the owner, before or after the clear.
"""

from __future__ import annotations

import asyncio
from pathlib import Path

from structlog.typing import FilteringBoundLogger

from xrmq.actors.runtime import Agent, AskError, get_logger

from .dump import export_section
from .journal import ContextStore, journal_name
from .journal_rows import Recovered
from .messages import LoadSection
from .plan import ContextPlan

MIGRATION_RETRY_S = 1.0
"""How often a host asks again an owner that did not take a migrated dialogue yet."""
MIGRATION_BATCH = 64
"""Migration asks in flight at once."""


class DialogueMigration:
    """The dialogues one host holds of participants other shards own, on their way there."""

    def __init__(self, agent: Agent, plan: ContextPlan, orphans: list[ContextStore]) -> None:
        self._agent = agent
        self._plan = plan
        self.orphans = orphans
        """Journals of shards that no longer exist, removed once migrated if empty."""
        self.foreign: dict[tuple[int, str], tuple[ContextStore, str, Recovered]] = {}
        """Dialogue states of participants another shard owns, to migrate there, by
        (journal, participant)."""
        self.migrated = 0
        """Dialogues migrated to the shard that owns them now."""
        self._task: asyncio.Task[None] | None = None

    def drop(self, participant_id: str | None) -> None:
        """Drop the waiting dialogue of a cleared participant (all for a global clear)."""
        section = journal_name(self._plan.config.dialogue)
        for key in [k for k in self.foreign if participant_id is None or k[1] == participant_id]:
            journal, participant, _ = self.foreign.pop(key)
            journal.delete(participant, section)

    def start(self, index: int) -> None:
        """Start migrating, if there is anything to migrate (the host is ready)."""
        if not (self.foreign or self.orphans):
            return
        get_logger(actor=self._agent.name).info(
            "context.migrating",
            participants=len(self.foreign),
            orphan_journals=[str(orphan.path) for orphan in self.orphans],
        )
        self._task = asyncio.create_task(self._migrate(), name=f"xrmq-context-migrate-{index}")

    async def finished(self) -> None:
        """Return once every foreign dialogue is migrated (at once when there is none)."""
        if self._task is not None:
            await asyncio.shield(self._task)

    async def _migrate(self) -> None:
        """Send every foreign dialogue to its owner until each is journaled there
        (``MIGRATION_BATCH`` asks at a time, so owners that are down cost one timeout)."""
        log = get_logger(actor=self._agent.name)
        while self.foreign:
            keys = list(self.foreign)
            for start in range(0, len(keys), MIGRATION_BATCH):
                batch = keys[start : start + MIGRATION_BATCH]
                await asyncio.gather(*(self._migrate_one(key, log) for key in batch))
            if self.foreign:
                log.warning(
                    "context.migration_waiting",
                    participants=len(self.foreign),
                    retry_s=MIGRATION_RETRY_S,
                )
                await asyncio.sleep(MIGRATION_RETRY_S)
        log.info("context.migrated", participants=self.migrated)
        for orphan in self.orphans:
            _remove_if_empty(orphan, log)
        self.orphans = []

    async def _migrate_one(self, key: tuple[int, str], log: FilteringBoundLogger) -> None:
        item = self.foreign.get(key)
        runtime = self._agent.runtime
        if item is None or runtime is None:
            return  # cleared meanwhile
        journal, pid, recovered = item
        section = self._plan.config.dialogue
        dump = export_section(section, recovered.state)
        try:
            await runtime.ask(
                self._plan.topics.dialogue_migrate,
                LoadSection("", 0, dump),
                reply_type=bool,
                participant_id=pid,
                source=self._agent.name,
                timeout=self._plan.control_timeout_s,
            )
        except (TimeoutError, AskError) as error:
            log.debug("context.migration_waiting", participant=pid, error=repr(error))
            return
        if self.foreign.pop(key, None) is not None:
            journal.delete(pid, journal_name(section))
            self.migrated += 1

    async def stop(self) -> None:
        """Stop migrating and close the orphan journals (the host is stopping)."""
        if self._task is not None:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)
        for orphan in self.orphans:
            orphan.close()


def _remove_if_empty(store: ContextStore, log: FilteringBoundLogger) -> None:
    """Close an orphan journal; remove its files once nothing is left in it (the tools
    transcripts it may hold keep it)."""
    empty = store.total_rows() == 0
    store.close()
    if empty:
        for suffix in ("", "-wal", "-shm"):
            Path(f"{store.path}{suffix}").unlink(missing_ok=True)
        log.info("context.orphan_journal_removed", path=str(store.path))
