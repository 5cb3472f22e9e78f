"""Publishing a section host's views, coalesced per loop turn, after the journal has them.

State is only touched by synchronous code (handlers that never await, and timer
callbacks), so on the event loop every change is atomic: a view is never rendered from
a half-applied write. Views are coalesced: changes mark the participant dirty and one
callback per loop turn publishes one view per dirty participant, so a burst of sensor
updates costs one render.

With a journal (``journal.ContextStore``), that callback is the store's commit: every
section host of the process stages its dirty participants (``stage``), they are
committed in one transaction, and only then are their views published, so a write a
view acknowledges is durable. If the commit fails, the staging is undone and the next
commit stages them again. Reports of manual compactions go out after the views of
their turn, so the writer's next ``blocks()`` shows what was done.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable

from structlog.typing import FilteringBoundLogger

from xrmq.actors.runtime import Agent
from xrmq.schemas import ContextBlock
from xrmq.topics import Topic

from .engine import Section
from .journal import ContextStore
from .manual import CompactStatus
from .messages import CompactReport, SectionView
from .plan import ContextPlan
from .section_records import ParticipantRecord, journal_key
from .state import PendingJob

Staged = list[tuple[str, list[bytes], PendingJob | None]]
"""What a commit staged per participant: (participant, identities, stored job before)."""


class ViewPublication:
    """The participants of one section host whose view may have changed, and their
    publication (through the journal's commit when there is one)."""

    def __init__(
        self,
        agent: Agent,
        section: Section,
        plan: ContextPlan,
        participants: dict[str, ParticipantRecord],
        *,
        store: ContextStore | None,
        host: int,
        journal_name: str,
        send: Callable[[Topic, object, str], None],
        log: Callable[[str], FilteringBoundLogger],
        published: Callable[[], None],
    ) -> None:
        self._agent = agent
        self._section = section
        self._plan = plan
        self._participants = participants
        self._store = store
        self._host = host
        self._dialogue = section.spec.kind == "dialogue"
        self._journal_name = journal_name
        self._send = send
        self._log = log
        self._published = published
        """Called after each publication (the host retires idle participants then)."""
        self._dirty: set[str] = set()
        self._flush_handle: asyncio.Handle | None = None
        self._reports: list[tuple[Topic, CompactReport, str]] = []

    def is_dirty(self, participant_id: str) -> bool:
        return participant_id in self._dirty

    def discard(self, participant_id: str) -> None:
        """Forget a cleared participant's pending publication."""
        self._dirty.discard(participant_id)

    def mark_dirty(self, participant_id: str) -> None:
        self._dirty.add(participant_id)
        if self._store is not None:
            self._store.schedule(self)
        elif self._flush_handle is None:
            self._flush_handle = asyncio.get_running_loop().call_soon(self._flush)

    def report(
        self,
        participant_id: str,
        writer: str,
        seq: int,
        status: CompactStatus,
        detail: str = "",
        made_by: tuple[str, ...] = (),
    ) -> None:
        """Report a manual compaction after the views of this turn (so the writer's next
        ``blocks()`` shows what it did), with what made its summaries (``made_by``)."""
        report = CompactReport(self._section.spec.name, seq, status.value, detail, made_by)
        self._reports.append((self._plan.topics.compacted(writer), report, participant_id))
        self.mark_dirty(participant_id)

    def view(self, record: ParticipantRecord, blocks: tuple[ContextBlock, ...]) -> SectionView:
        """The record's view with ``blocks``, under this runtime's epoch."""
        runtime = self._agent.runtime
        epoch = runtime.epoch if runtime is not None and runtime.running else 0
        state = record.state
        return SectionView(
            self._section.spec.name,
            self._dialogue,
            state.generation,
            state.revision,
            blocks,
            *record.ack,
            host=self._host,
            epoch=epoch,
            acks=tuple(record.acks.items()),
        )

    def _flush(self) -> None:
        self._flush_handle = None
        reports, self._reports = self._reports, []
        self._publish(self._collect(None), reports)

    def _publish(
        self, views: list[tuple[str, SectionView]], reports: list[tuple[Topic, CompactReport, str]]
    ) -> None:
        topic = self._plan.topics.view
        for participant_id, view in views:
            record = self._participants.get(participant_id)
            if record is not None and record.state.generation == view.generation:
                record.view = view
            self._send(topic, view, participant_id)
        for report_topic, report, participant_id in reports:
            self._send(report_topic, report, participant_id)
        self._published()

    def stage(self, store: ContextStore) -> tuple[list[Callable[[], None]], Callable[[], None]]:
        """The journal's commit of this turn: stage every dirty participant's state;
        return the sending of their views, which the store runs once committed, and
        what undoes the staging if the commit fails (the next commit stages all again)."""
        staged: Staged = []
        views = self._collect(store, staged)
        reports, self._reports = self._reports, []

        def failed() -> None:
            for participant_id, identities, stored_job in staged:
                record = self._participants.get(participant_id)
                if record is not None:
                    record.identities[:0] = identities
                    record.stored_job = stored_job
                    record.journaled = record.published = None
                    self._dirty.add(participant_id)
            self._reports[:0] = reports

        return ([lambda: self._publish(views, reports)] if views or reports else []), failed

    def _collect(
        self, store: ContextStore | None, staged: Staged | None = None
    ) -> list[tuple[str, SectionView]]:
        dirty, self._dirty = self._dirty, set()
        views: list[tuple[str, SectionView]] = []
        name = self._journal_name
        for participant_id in dirty:
            record = self._participants.get(participant_id)
            if record is None:
                continue
            state = record.state
            if store is not None:
                key = journal_key(record)
                if key != record.journaled or record.identities:
                    job: PendingJob | bool | None = (
                        True if state.pending is record.stored_job else state.pending
                    )
                    store.put(participant_id, name, state, record.acks, record.identities, job)
                    if staged is not None:
                        staged.append((participant_id, record.identities, record.stored_job))
                    record.identities = []
                    record.stored_job = state.pending
                    record.journaled = key
            published = (state.revision, record.ack)
            if published == record.published:
                continue
            rendered = self._section.render(state)
            if rendered.warning is not None and record.warned != state.revision:
                record.warned = state.revision
                self._log(participant_id).warning(
                    "context.over_budget", message=rendered.warning.message()
                )
            views.append((participant_id, self.view(record, rendered.blocks)))
            record.published = published
        return views

    def stop(self) -> None:
        """Cancel a pending publication (the host is stopping)."""
        if self._flush_handle is not None:
            self._flush_handle.cancel()
            self._flush_handle = None
