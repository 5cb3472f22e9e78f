"""Which participants of a section live in memory, and which in the journal alone.

With a journal, a topic section keeps in memory only the participants written within
``retire_idle_s``, at most ``max_resident_participants`` (``ContextPlan``): the others
are retired to the journal once it holds exactly what memory holds (nothing dirty, no
transaction being written, no compaction out), so retiring loses nothing. A retired
participant's next write, load, compaction or clear reads it back first (``get``: a
point read on the journal's thread, which the loop waits for, after the transaction in
flight); a fetch, a snapshot page or a dump reads it without keeping it (``peek``,
``prefetch``). A context process opens its journal with the topic sections read on
demand (``ON_DEMAND_ALL``), so a restart reads only their participant ids
(``adopt_journal``). A dialogue actor holds one participant and is retired whole
(``DialogueSectionActor.retire_if_idle``, by the same ``retirable`` rule), so a dialogue
section never retires here.

The participants dict is the host's; this object decides what stays in it, least
recently used first (its order).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Sequence
from uuid import uuid4

from .engine import Section
from .journal import ContextStore
from .journal_rows import Recovered
from .plan import ContextPlan
from .section_records import ParticipantRecord, journal_key


class Residency:
    """The participants of one section host in memory, and those retired to its journal."""

    def __init__(
        self,
        section: Section,
        plan: ContextPlan,
        participants: dict[str, ParticipantRecord],
        *,
        store: ContextStore | None,
        journal_name: str,
        revive: Callable[[Recovered], ParticipantRecord],
        unsaved: Callable[[str], bool],
    ) -> None:
        self._section = section
        self._plan = plan
        self._store = store
        self._journal_name = journal_name
        self._revive = revive
        """The record of a state read from the journal, its view rendered."""
        self._unsaved = unsaved
        """Whether a participant has changes not yet staged for the journal."""
        self.participants = participants
        self.retiring = store is not None and section.spec.kind != "dialogue"
        """Whether idle participants are retired to the journal (a topic section with a
        journal; a dialogue actor holds one participant and retires whole)."""
        self.retired = 0
        """Participants retired from memory to the journal."""
        self.retired_ids: set[str] = set()
        """The participants the journal alone holds (``adopt_journal``, ``sweep``): only
        these are read from it, so a new participant's first write costs no read."""
        self.loaded = 0
        """Retired participants loaded back from the journal by a write, load, compaction
        or clear."""
        self._sweeper: asyncio.TimerHandle | None = None
        self._prefetched: dict[str, ParticipantRecord] = {}
        """Retired participants read for the snapshot page being built (``prefetch``)."""

    def get(self, participant_id: str) -> ParticipantRecord | None:
        """The participant's state in memory, loaded back from the journal if it was
        retired (so a write never lands on an empty state); None if neither holds it."""
        record = self.participants.get(participant_id)
        if record is not None:
            if self.retiring:
                self.participants[participant_id] = self.participants.pop(participant_id)
            record.used = time.monotonic()
            return record
        if participant_id not in self.retired_ids or self._store is None:
            return None
        self.retired_ids.discard(participant_id)
        recovered = self._store.read_section(participant_id, self._journal_name)
        if recovered is None:
            return None
        record = self.participants[participant_id] = self._revive(recovered)
        record.published = (record.state.revision, record.ack)  # the view it had
        self.loaded += 1
        return record

    def resident(self, participant_id: str) -> ParticipantRecord:
        """``get``, or a new empty state (a first write)."""
        record = self.get(participant_id)
        if record is None:
            record = self.participants[participant_id] = ParticipantRecord(
                self._section.new_state(uuid4().hex)
            )
        return record

    def peek(self, participant_id: str) -> ParticipantRecord | None:
        """The participant's state, read from the journal without keeping it in memory if
        it was retired (a snapshot, a fetch or a dump)."""
        record = self.participants.get(participant_id) or self._prefetched.get(participant_id)
        if record is None and participant_id in self.retired_ids and self._store is not None:
            recovered = self._store.read_section(participant_id, self._journal_name)
            if recovered is None:
                self.retired_ids.discard(participant_id)  # quarantined: nothing to read again
            else:
                record = self._revive(recovered)
        return record

    def prefetch(self, participant_ids: Sequence[str]) -> None:
        """Read the retired among ``participant_ids`` from the journal in one go, for the
        reads of a snapshot page that follow (synchronously: nothing changes meanwhile);
        ``forget_prefetched`` once the page is built."""
        wanted = [pid for pid in participant_ids if pid in self.retired_ids]
        if wanted and self._store is not None:
            found = self._store.read_sections(self._journal_name, wanted)
            for pid in wanted:
                recovered = found.get(pid)
                if recovered is None:
                    self.retired_ids.discard(pid)  # quarantined: nothing to read again
                else:
                    self._prefetched[pid] = self._revive(recovered)

    def forget_prefetched(self) -> None:
        self._prefetched = {}

    def participant_ids(self) -> set[str]:
        """Every participant this section holds, in memory or retired to the journal."""
        return set(self.participants) | self.retired_ids

    def adopt_journal(self) -> None:
        """Count as retired every participant the journal holds and memory does not (a
        journal opened with this section read on demand, ``open_store``'s
        ``on_demand_prefix``): their ids are read, their states when first used."""
        if self.retiring and self._store is not None:
            journaled = self._store.section_participants(self._journal_name)
            self.retired_ids.update(pid for pid in journaled if pid not in self.participants)

    def retirable(self, participant_id: str, record: ParticipantRecord) -> bool:
        """Whether the journal holds the participant's state exactly as memory does, with
        nothing in flight (no change unsaved, job out, manual compaction or view unpublished)."""
        state = record.state
        return (
            not self._unsaved(participant_id)
            and record.job is None
            and not record.manual
            and not record.identities
            and state.pending is None
            and record.journaled == journal_key(record)
            and record.published == (state.revision, record.ack)
        )

    def sweep(self) -> None:
        """Retire to the journal the participants unused for ``retire_idle_s``, and the
        least recently used beyond ``max_resident_participants``: only what the journal
        holds as it is in memory (nothing dirty, no transaction being written, no
        compaction out), so dropping it from memory loses nothing."""
        store = self._store
        if not self.retiring or store is None or store.writing:
            return
        over = len(self.participants) - self._plan.max_resident_participants
        idle_before = time.monotonic() - self._plan.retire_idle_s
        for participant_id in list(self.participants):  # least recently used first
            record = self.participants[participant_id]
            if over <= 0 and record.used > idle_before:
                break
            if self.retirable(participant_id, record):
                del self.participants[participant_id]
                self.retired_ids.add(participant_id)
                self.retired += 1
                over -= 1

    def start(self) -> None:
        """Sweep every ``retire_idle_s / 4`` (at most a minute) from now on, if retiring."""
        if self.retiring and self._sweeper is None:
            self._sweeper = asyncio.get_running_loop().call_later(self._sweep_every_s, self._tick)

    def _tick(self) -> None:
        self.sweep()
        self._sweeper = asyncio.get_running_loop().call_later(self._sweep_every_s, self._tick)

    @property
    def _sweep_every_s(self) -> float:
        return min(60.0, self._plan.retire_idle_s / 4)

    def stop(self) -> None:
        if self._sweeper is not None:
            self._sweeper.cancel()
            self._sweeper = None
