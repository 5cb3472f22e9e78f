"""What a context section is and remembers: the engine's data, apart from its operations.

``SectionSpec`` (name, kind, budget) and ``CompactionSettings`` configure a section;
``SectionState`` is everything it remembers for one participant, a mutable msgspec Struct
so an actor can journal it and restore it whole (``store``) and a dump can carry it
(``dump``); ``ApplyStatus``, ``OverBudget`` and ``RenderedSection`` are what the
operations (``engine.Section``) return. The exchange identities (``exchange_identity``,
``history_tail``) are here too: a manager in another process than the dialogue section
computes with them exactly what the section will add, without the operations.

Pure like the engine: no I/O, no clock (times are passed in), no model.
"""

from __future__ import annotations

import enum
import hashlib
from collections.abc import Sequence
from collections.abc import Set as AbstractSet
from typing import Literal

import msgspec

from xrmq.schemas import CompactionPrompts, ContextBlock

from .compaction import CompactionRequest
from .render import check_timestamp

SectionKind = Literal["dialogue", "incremental", "summary"]
"""Dialogue and incremental topics keep entries and a rolling summary; a summary topic
keeps only its latest state and is never compacted."""

INPUT_BUDGET_MARGIN_BYTES = 256
"""docs/context.md: the compaction input budget is at least half a section budget plus this."""


def min_input_budget(budget_bytes: int) -> int:
    """Smallest compaction input budget a section with ``budget_bytes`` accepts."""
    return (budget_bytes + 1) // 2 + INPUT_BUDGET_MARGIN_BYTES


def _positive_int(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value > 0


class SectionSpec(msgspec.Struct, frozen=True):
    """What a section is: its name (``dialogue`` or the topic), kind and byte budget."""

    name: str
    kind: SectionKind
    budget_bytes: int

    def __post_init__(self) -> None:
        if not self.name:
            raise ValueError("SectionSpec.name: must be non-empty")
        if not _positive_int(self.budget_bytes):
            raise ValueError(
                f"SectionSpec.budget_bytes: must be a positive int (section {self.name!r})"
            )

    @property
    def summary_limit_bytes(self) -> int:
        """A summary is limited to a quarter of the section's budget (at least 1 byte, so
        a limit can be stated even for a budget under 4 bytes)."""
        return max(self.budget_bytes // 4, 1)

    @property
    def stored_limit_bytes(self) -> int:
        """Uncompacted entries (but the newest) are held to four budgets, whatever the write
        rate: past it (a flood while compaction lags) the oldest entries no job holds are
        dropped and counted (``SectionState.dropped_entries``), so a section's memory and
        journal row stay bounded. Four: a job in flight takes at most an input budget, and
        the entries that arrive meanwhile compact in the next run."""
        return 4 * self.budget_bytes


SummarySource = Literal["", "model", "extractive"]
"""What made a section's summary: nothing yet (or a merged dump), the model, or the
deterministic extractive fallback."""


class CompactionSettings(msgspec.Struct, frozen=True):
    """Manager-wide compaction configuration shared by every section."""

    input_budget_bytes: int
    """Bound on the previous summary plus the entries sent in one request."""
    prompts: CompactionPrompts = msgspec.field(default_factory=CompactionPrompts)
    guarded: bool = True
    """Summary guards (docs/context.md, "Compaction"): every model summary is checked
    (``salience.summary_problem``) before it replaces entries, a failing request is never
    resent unchanged, and material the model keeps failing on is compacted by the extractive
    fallback. On by default; off, the engine behaves as the seed table alone says."""


class Entry(msgspec.Struct, frozen=True):
    """One verbatim entry: an exchange, an incremental update or a summary topic's state.

    ``text`` is the rendered block text (see ``render``), ``size`` its UTF-8 bytes.
    """

    entry_id: int
    timestamp_us: int
    text: str
    size: int
    identity: bytes = b""
    """A dialogue entry's exchange identity (``exchange_identity``), so a dump of the
    section can be merged into another without duplicating an exchange; empty for
    topic entries."""


class PendingJob(msgspec.Struct, frozen=True):
    """The job in flight: its request and the snapshot of entry ids it summarizes."""

    request: CompactionRequest
    entry_ids: tuple[int, ...]
    candidate: str = ""
    """For a condense job: the over-limit summary being shortened."""


class CondenseDue(msgspec.Struct, frozen=True):
    """An over-limit summary for ``entry_ids`` that waits for its condense request."""

    candidate: str
    entry_ids: tuple[int, ...]


class SectionState(msgspec.Struct):
    """Everything one section remembers for one participant.

    ``generation`` must differ from that of any earlier state of the same section and
    participant (an actor uses a uuid), so results of jobs issued before a ``clear`` can
    never match the new state. ``revision`` increases whenever the rendered section can
    change; actors version their published views with it.
    """

    generation: str
    summary: str = ""
    entries: list[Entry] = []
    """Uncompacted entries in recorded-time order (timestamp, then entry id)."""
    revision: int = 0
    next_entry_id: int = 1
    next_job_id: int = 1
    pending: PendingJob | None = None
    condense_due: CondenseDue | None = None
    backlog: list[int] = []
    """Entry ids still to compact in the current run, which started when the trigger fired."""
    awaiting_entry: bool = False
    """A compaction failed: the next one waits for the section's next entry."""
    exchange_identities: set[bytes] = set()
    """Short identities of every exchange recorded this session (dialogue only)."""
    dropped_entries: int = 0
    """Entries dropped uncompacted to hold the section to ``stored_limit_bytes``."""
    summary_by: SummarySource = ""
    """What made ``summary`` (guarded settings): the model or the extractive fallback."""
    failures: int = 0
    """Failed model requests in a row on the current material (guarded settings)."""
    failed_request: bytes = b""
    """Digest of the last failed request's material, so it is never resent unchanged."""
    batch_cap: int = 0
    """Most entries the next compact request may take (0: as many as fit)."""
    frozen_summaries: int = 0
    """Model summaries refused as the previous summary again (``summary_problem``)."""
    lossy_summaries: int = 0
    """Model summaries refused for dropping the entries' values (``summary_problem``)."""
    fallbacks: int = 0
    """Batches compacted by the extractive fallback instead of the model."""
    fallback_streak: int = 0
    """Fallbacks since the model's last accepted summary."""
    model_skips: int = 0
    """Backoff: compactions still to make by the fallback before the model is asked again."""


class ApplyStatus(enum.Enum):
    """What ``Section.apply_result`` did with a result."""

    APPLIED = "applied"
    """The summary was replaced and the snapshot's entries removed."""
    CLIPPED = "clipped"
    """Condensing failed or stayed too long; the summary kept its start and end."""
    CONDENSE_DUE = "condense_due"
    """The summary was over its limit; ``next_compaction`` returns a condense request."""
    FAILED = "failed"
    """Empty, cut off or an error: entries kept, retried after the section's next entry."""
    REJECTED = "rejected"
    """Guarded: the summary failed the check (frozen or lossy); handled like a failure."""
    FALLBACK = "fallback"
    """Guarded: the model failed the same material again; the extractive summariser
    compacted the batch instead."""
    STALE = "stale"
    """The result's job is not the pending job; it was discarded and nothing changed."""


class OverBudget(msgspec.Struct, frozen=True):
    """A rendered section left out or clipped uncompacted entries to fit its budget.

    The caller logs it. The entries stay stored until a summary replaces them.
    """

    section: str
    budget_bytes: int
    stored_bytes: int
    """Rendered size of all uncompacted entries."""
    omitted_entries: int
    """Oldest entries left out of the prompt."""
    clipped_newest: bool
    """The newest entry alone exceeded the room left and kept only its start and end."""

    def message(self) -> str:
        """One log line describing the situation."""
        clipped = "; the newest entry kept its start and end" if self.clipped_newest else ""
        return (
            f"context section {self.section!r} over its budget of {self.budget_bytes} bytes "
            f"({self.stored_bytes} bytes uncompacted): left out the {self.omitted_entries} oldest "
            f"entries{clipped}; they stay stored until compacted"
        )


class RenderedSection(msgspec.Struct, frozen=True):
    """A section as rendered into prompts, versioned by the state's revision."""

    revision: int
    blocks: tuple[ContextBlock, ...]
    warning: OverBudget | None = None


def exchange_identity(
    request: str, answer: str, timestamp_us: int | None, exchange_id: object | None
) -> bytes:
    """Short identity of an exchange, remembered for the session.

    The id decides when there is one (any msgspec-encodable value); an exchange without
    an id is identified by its request, answer and timestamp.
    """
    if exchange_id is not None:
        material = b"id\x00" + msgspec.msgpack.encode(exchange_id)
    else:
        material = b"content\x00" + msgspec.msgpack.encode((request, answer, timestamp_us))
    return hashlib.blake2b(material, digest_size=12).digest()


def history_tail(
    known: AbstractSet[bytes],
    exchanges: Sequence[tuple[str, str, int | None]],
    *,
    exchange_ids: Sequence[object | None],
    now_us: int,
) -> list[tuple[bytes, str, str, int]]:
    """The exchanges of a front-end window that ``reconcile_history`` adds, oldest first.

    Each is ``(identity, request, answer, timestamp_us)``: the contiguous tail after the
    window's last exchange whose identity is in ``known``, without repeats, an exchange
    without a timestamp at ``now_us``. Pure, so a manager in another process than the
    dialogue section computes exactly what the section will add. Raises ``ValueError``
    (and returns nothing) for a window with a bad id count or timestamp.
    """
    if len(exchange_ids) != len(exchanges):
        raise ValueError("exchange_ids: must have exactly one id per exchange")
    check_timestamp(now_us)
    # Newest first, back to the last known exchange: a window whose newest exchange is
    # known (the common case: the destination recorded it) costs one identity, not one
    # per exchange, on every turn.
    tail: list[tuple[str, str, int | None, bytes]] = []
    for (request, answer, timestamp_us), exchange_id in zip(
        reversed(exchanges), reversed(exchange_ids)
    ):
        identity = exchange_identity(request, answer, timestamp_us, exchange_id)
        if identity in known:
            break
        tail.append((request, answer, timestamp_us, identity))
    tail.reverse()
    for _, _, timestamp_us, _ in tail:  # validate all first: a bad window adds nothing
        if timestamp_us is not None:
            check_timestamp(timestamp_us)
    added: list[tuple[bytes, str, str, int]] = []
    seen: set[bytes] = set()
    for request, answer, timestamp_us, identity in tail:
        if identity in seen:
            continue  # repeated within the window
        seen.add(identity)
        added.append((identity, request, answer, now_us if timestamp_us is None else timestamp_us))
    return added
