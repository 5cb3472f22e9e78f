"""The manager's local replica of one participant's context (pure).

It holds the latest ``SectionView`` of each section, and the dialogue writes this
manager made that no view has acknowledged yet (read-your-writes for a section actor
in another process), with the exchange identities this manager knows for the
participant (so ``record_exchange``/``reconcile_history`` decide locally, exactly as
the section will, what is new). Views replace each other whole, so a rendering never
mixes two states of a section.
"""

from __future__ import annotations

from typing import cast

from xrmq.schemas import ContextBlock

from .clip import utf8_size
from .messages import SectionView, view_ack
from .plan import ContextSections
from .render import fit_newest, render_participant


class ParticipantReplica:
    __slots__ = ("complete", "dialogue", "identities", "pending", "topics")

    def __init__(self, *, complete: bool) -> None:
        self.dialogue: SectionView | None = None
        self.topics: dict[str, SectionView] = {}
        self.pending: list[tuple[int, ContextBlock]] = []
        """(write seq, rendered exchange) of dialogue writes not yet in a view."""
        self.identities: set[bytes] = set()
        self.complete = complete
        """Whether it holds every section the hosts hold (else it is fetched before use)."""

    def apply_view(self, view: SectionView, writer: str) -> None:
        """Take a section's newest view; drop the pending writes it acknowledges.

        A view older than the one held (same host incarnation and generation, lower
        revision: a fetched snapshot's reply overtook it) is ignored."""
        held = self.dialogue if view.dialogue else self.topics.get(view.section)
        if (
            held is not None
            and (held.host, held.epoch, held.generation) == (view.host, view.epoch, view.generation)
            and held.revision > view.revision
        ):
            return
        if not view.dialogue:
            self.topics[view.section] = view
            return
        self.dialogue = view
        if self.pending:
            acked = view_ack(view, writer)
            if acked:
                self.pending = [item for item in self.pending if item[0] > acked]

    def drop_host(self, host: int, epoch: int, keep: set[str]) -> None:
        """After a resync from ``host``'s snapshot at ``epoch``: drop its older views of
        sections the snapshot does not hold (the restarted host no longer has them)."""
        if (
            self.dialogue is not None
            and self.dialogue.host == host
            and self.dialogue.epoch < epoch
            and self.dialogue.section not in keep
        ):
            self.dialogue = None
        for name in [
            name
            for name, view in self.topics.items()
            if view.host == host and view.epoch < epoch and name not in keep
        ]:
            del self.topics[name]

    def forget(self, generations: tuple[str, ...]) -> None:
        """Drop the views of cleared section states."""
        if self.dialogue is not None and self.dialogue.generation in generations:
            self.dialogue = None
        for name in [name for name, view in self.topics.items() if view.generation in generations]:
            del self.topics[name]

    @property
    def empty(self) -> bool:
        return (
            self.dialogue is None and not self.topics and not self.pending and not self.identities
        )

    def dialogue_blocks(self, budget_bytes: int) -> tuple[ContextBlock, ...]:
        """The dialogue as its section renders it, with this manager's pending writes in it.

        Pending exchanges join the view's entries in time order, and the result is fitted
        to the budget by the section's own rule (newest kept, oldest left out).
        """
        view_blocks = self.dialogue.blocks if self.dialogue is not None else ()
        if not self.pending:
            return view_blocks
        summaries = [block for block in view_blocks if block.timestamp_us is None]
        dated = [block for block in view_blocks if block.timestamp_us is not None]
        shown = set(dated)  # a write re-sent by a new manager may already be in the view
        dated.extend(block for _, block in self.pending if block not in shown)
        dated.sort(key=lambda block: cast(int, block.timestamp_us))  # every one is dated
        room = budget_bytes - sum(utf8_size(block.text) for block in summaries)
        kept, _, _ = fit_newest(dated, room)
        return (*summaries, *kept)

    def blocks(self, config: ContextSections) -> tuple[ContextBlock, ...]:
        """Prompt order: summaries first (dialogue, then topics in configured order),
        then every dated block in recorded-time order."""
        sections = [self.dialogue_blocks(config.dialogue.spec.budget_bytes)]
        for section in config.topics:
            view = self.topics.get(section.spec.name)
            if view is not None:
                sections.append(view.blocks)
        return render_participant(sections)
