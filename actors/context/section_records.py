"""What a section host keeps per participant: its state, and what the state owes.

``ParticipantRecord`` is the section's ``SectionState`` plus what the actor around it
tracks: the compaction job out at a worker (``JobOut``), the writers' acknowledged
writes, what was last journaled and published, the manual compactions waiting for the
run to end and what made their summaries. The host's parts (residency, compaction
dispatch, view publication) share these records; the functions here are the few rules
over a record they all need.
"""

from __future__ import annotations

import asyncio
import time

from .compaction import CompactionResult, JobRef
from .messages import SectionView
from .state import PendingJob, SectionState


class JobOut:
    """The pending job of one participant's section: where it went and its timer."""

    __slots__ = ("job", "timer", "workers")

    def __init__(self, job: JobRef, worker: int, timer: asyncio.TimerHandle) -> None:
        self.job = job
        self.workers = [worker]
        self.timer = timer


class ParticipantRecord:
    """One participant's state in a section host, and what the host tracks about it."""

    __slots__ = (
        "ack",
        "acks",
        "identities",
        "job",
        "journaled",
        "made",
        "manual",
        "published",
        "state",
        "stored_job",
        "used",
        "view",
        "warned",
    )

    def __init__(self, state: SectionState, acks: tuple[tuple[str, int], ...] = ()) -> None:
        self.state = state
        self.job: JobOut | None = None
        self.acks: dict[str, int] = dict(acks)
        """The last write applied of each writer (manager), least recent first; bounded
        (``MAX_WRITERS``), so a re-sent write of any of them is recognized."""
        self.ack: tuple[str, int] = acks[-1] if acks else ("", 0)
        """The latest write applied, of any writer."""
        self.published: tuple[int, tuple[str, int]] | None = None
        self.warned = -1
        self.identities: list[bytes] = []
        """Exchange identities added since the journal last stored this state."""
        self.journaled: tuple | None = None
        self.stored_job: PendingJob | None = state.pending
        self.manual: list[tuple[str, int]] = []
        """Manual compactions (writer, seq) waiting for the run to end."""
        self.made: dict[str, int] = {}
        """While manual compactions wait: the summaries their run made so far, by what made
        them (``model``, ``extractive``), for their report."""
        self.view: SectionView | None = None
        """The latest view published (so journaled): what a snapshot shows."""
        self.used = time.monotonic()
        """When it was last written (retirement to the journal goes by it)."""


MAX_WRITERS = 16
"""Writers (managers) whose last applied write a section remembers per participant. A
manager re-sends only while it lives, and a restarted one has a new id, so these are
the live managers writing that participant's section, not a growing history."""


def acknowledge(record: ParticipantRecord, ack: tuple[str, int]) -> None:
    """Record ``ack`` (writer, seq) as the writer's last applied write, and the latest."""
    writer, seq = ack
    acks = record.acks
    acks.pop(writer, None)
    acks[writer] = seq
    if len(acks) > MAX_WRITERS:
        del acks[next(iter(acks))]
    record.ack = ack


def journal_key(record: ParticipantRecord) -> tuple:
    """What the journal must hold for the record to be journaled as it is in memory."""
    state = record.state
    return (
        state.revision,
        record.ack,
        state.next_job_id,
        state.next_entry_id,
        len(state.backlog),
        state.awaiting_entry,
        id(state.pending),
        id(state.condense_due),
        state.generation,
    )


def guarded(state: SectionState) -> tuple[int, int, int]:
    """The state's guard counters: summaries refused as frozen, as lossy, and fallbacks."""
    return (state.frozen_summaries, state.lossy_summaries, state.fallbacks)


def failure(result: CompactionResult) -> str:
    """Why a compact result was not applied (failed, or refused by the summary check)."""
    if result.error is not None:
        return result.error
    if result.finish_reason not in (None, "stop"):
        return f"the model stopped: {result.finish_reason}"
    if result.text.strip():
        return "the model's summary was refused: the previous summary again, or values lost"
    return "the model returned no summary"
