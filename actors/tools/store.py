"""Transcripts held by a keyed actor: ``TranscriptActor``, journaled by the context store.

A ``ToolAgent`` given a ``transcripts`` name works on a local copy of each participant's
transcript and mirrors every change to a keyed actor (one instance per participant,
sharded like the context sections, in the context process): after a turn commits,
``append`` carries the turn's messages; after a compaction rewrote the transcript,
``replace`` carries all of it. The reclaimed originals stored since the last write, the
summary, the token count (and whether it was estimated), docs/tools.md's counters and
the new turns' ids (a replace: all the transcript keeps) travel with either. A ``ToolAgent``
that does not hold a participant's transcript (a new process, a restart) loads it from
the actor with an ask. So the transcript outlives the agent's process.

With a journal (``xrmq.actors.context.store.ContextStore``, the context process's own),
every write is journaled (each message a row holding OpenAI's typed chat message as the
agent's ``Conversation`` holds it, in msgpack) before it is acknowledged,
so the transcript also outlives the context process: a restarted actor starts from the
journal. A write is an ask answered with ``TranscriptAck`` once committed. Each write
names the revision it applies to (``base``) and the one it makes; an ``append`` whose
base is not the actor's revision (the actor missed a write: its process was down) is
refused, and the agent sends the whole transcript (a ``replace``) instead. An unanswered
write (the store is down) makes the agent send a ``replace`` with its next write, and
again after ``RESYNC_DELAYS_S``.

Topics for store NAME: ``NAME.transcript.write`` (``TranscriptWrite`` -> ``TranscriptAck``)
and ``NAME.transcript.load`` (``TranscriptLoad`` -> ``TranscriptState``); the
participant is in the envelope.
"""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal

import msgspec

from xrmq.actors.runtime import Agent, AgentRuntime, RuntimeContext, get_logger
from xrmq.schemas._validation import check_name
from xrmq.topics import Topic

from .conversation_state import CompactionCounter, checked_message
from .transcript import Transcript

if TYPE_CHECKING:
    from xrmq.actors.context.journal import ContextStore
    from xrmq.actors.context.journal_rows import RecoveredTranscript

RESYNC_DELAYS_S = (0.5, 1.0, 2.0, 4.0)
"""After an unanswered write, the agent re-sends the whole transcript after these delays
(while the store stays silent and no newer write went out)."""


class TranscriptCounters(msgspec.Struct, frozen=True):
    """docs/tools.md's counters of a transcript (``conversation_state.CompactionCounter``)
    on the wire."""

    tool_rounds: int = 0
    summary_rounds: int = 0
    toolcall_rounds_total: int = 0
    toolcall_reclaimed: int = 0
    nothing_to_condense: int = 0
    summarize_failed: int = 0
    originals_evicted: int = 0

    @classmethod
    def of(cls, counters: CompactionCounter) -> TranscriptCounters:
        return cls(**dataclasses.asdict(counters))

    def held(self) -> CompactionCounter:
        return CompactionCounter(**msgspec.structs.asdict(self))


_encode = msgspec.msgpack.Encoder().encode
_decode_param = msgspec.msgpack.Decoder(dict[str, Any]).decode

Message = dict[str, Any]
"""A transcript message as the agent and the store actor hold it: OpenAI's typed chat
message (``conversation_state.Conversation.messages``)."""

WireMessage = bytes
"""A message in a write or a state: the MessagePack of its typed dict, the journal row's
bytes. Bytes keep bus messages deeply immutable (a dict a receiver holds could change
under it, or under the sender), and the store journals them without encoding again."""


def wire_messages(messages: Iterable[Any]) -> tuple[WireMessage, ...]:
    """A transcript's messages (a ``Conversation`` 's typed dicts) as a write carries them."""
    return tuple(_encode(message) for message in messages)


def held_messages(messages: Sequence[WireMessage]) -> list[Message]:
    """A write's or a state's messages as typed dicts (checked when the write was made)."""
    return [_decode_param(blob) for blob in messages]


def _checked_messages(messages: tuple[WireMessage, ...], owner: str) -> None:
    for index, blob in enumerate(messages):
        try:
            message = _decode_param(blob)
        except msgspec.DecodeError as error:  # ValidationError is one
            raise ValueError(f"{owner}.messages[{index}]: not a message: {error}") from None
        checked_message(message, f"{owner}.messages[{index}]")


class TranscriptWrite(msgspec.Struct, frozen=True):
    """One change: ``append`` the turn's messages, ``replace`` them all (after a
    compaction, or to resync), or ``clear`` the transcript (the participant left)."""

    kind: Literal["append", "replace", "clear"]
    messages: tuple[WireMessage, ...]
    summary: str | None = None
    total_tokens: int | None = None
    originals: tuple[tuple[str, str], ...] = ()
    """Reclaimed originals stored since the previous write (every one for a replace),
    oldest first."""
    counters: TranscriptCounters = msgspec.field(default_factory=TranscriptCounters)
    base: int = 0
    """The revision an ``append`` applies to."""
    revision: int = 0
    """The transcript's revision after this write."""
    turn_ids: tuple[str, ...] = ()
    """Ids of the turns committed since the previous write (every one kept for a
    replace), oldest first (``Transcript.turn_ids``)."""
    tokens_estimated: bool = False
    """``total_tokens`` was counted by a tokenizer (the provider reported no usage)."""

    def __post_init__(self) -> None:
        _checked_messages(self.messages, "TranscriptWrite")


class TranscriptAck(msgspec.Struct, frozen=True):
    """A write's answer: ``applied`` (else refused: an ``append`` on another revision),
    the actor's ``revision`` now, and whether the change is in the journal."""

    applied: bool
    revision: int
    journaled: bool = False


class TranscriptLoad(msgspec.Struct, frozen=True):
    """Ask for the participant's whole transcript."""


class TranscriptState(msgspec.Struct, frozen=True):
    """A participant's whole transcript."""

    messages: tuple[WireMessage, ...] = ()
    summary: str | None = None
    total_tokens: int | None = None
    originals: tuple[tuple[str, str], ...] = ()
    counters: TranscriptCounters = msgspec.field(default_factory=TranscriptCounters)
    revision: int = 0
    turn_ids: tuple[str, ...] = ()
    tokens_estimated: bool = False

    def __post_init__(self) -> None:
        _checked_messages(self.messages, "TranscriptState")


class TranscriptHeader(msgspec.Struct, frozen=True):
    """What the journal keeps of a transcript besides its messages and originals."""

    summary: str | None
    total_tokens: int | None
    counters: TranscriptCounters
    revision: int
    turn_ids: tuple[str, ...] = ()
    """Absent from a header journaled before turns had ids: none."""
    tokens_estimated: bool = False
    """Absent from a header journaled before it was kept: False."""


_decode_header = msgspec.msgpack.Decoder(TranscriptHeader).decode


@dataclass(frozen=True, slots=True)
class TranscriptTopics:
    write: Topic[TranscriptWrite]
    load: Topic[TranscriptLoad]

    @classmethod
    def of(cls, name: str) -> TranscriptTopics:
        check_name(name, "transcripts")
        return cls(
            Topic(f"{name}.transcript.write", TranscriptWrite),
            Topic(f"{name}.transcript.load", TranscriptLoad),
        )


def apply_write(transcript: Transcript, write: TranscriptWrite) -> None:
    """Apply one write to a transcript (the actor's copy)."""
    if write.kind == "clear":
        transcript.clear()
        return
    if write.kind == "replace":
        transcript.replace(held_messages(write.messages))
        transcript.summary = write.summary
        transcript.turn_ids.clear()
    else:
        transcript.extend(held_messages(write.messages))
    transcript.note_turn_ids(write.turn_ids)
    transcript.note_usage(write.total_tokens, estimated=write.tokens_estimated)
    transcript.counters = write.counters.held()
    transcript.store_originals(write.originals)
    transcript.revision = write.revision


def write_of(
    transcript: Transcript,
    kind: Literal["append", "replace"],
    messages: tuple[WireMessage, ...],
    originals: tuple[tuple[str, str], ...],
    new_turn_ids: tuple[str, ...] = (),
) -> TranscriptWrite:
    """The next write of ``transcript`` (advancing its revision); an append carries
    ``new_turn_ids``, a replace every turn id the transcript keeps."""
    base = transcript.revision
    transcript.revision += 1
    return TranscriptWrite(
        kind,
        messages,
        transcript.summary,
        transcript.total_tokens,
        originals,
        TranscriptCounters.of(transcript.counters),
        base,
        transcript.revision,
        tuple(transcript.turn_ids) if kind == "replace" else new_turn_ids,
        transcript.tokens_estimated,
    )


def state_of(transcript: Transcript) -> TranscriptState:
    return TranscriptState(
        wire_messages(transcript.messages),
        transcript.summary,
        transcript.total_tokens,
        transcript.originals(),
        TranscriptCounters.of(transcript.counters),
        transcript.revision,
        tuple(transcript.turn_ids),
        transcript.tokens_estimated,
    )


def restore(state: TranscriptState) -> Transcript:
    """A transcript with ``state`` (what a ``ToolAgent`` loads)."""
    transcript = Transcript()
    apply_write(
        transcript,
        TranscriptWrite(
            "replace",
            state.messages,
            state.summary,
            state.total_tokens,
            state.originals,
            state.counters,
            state.revision,
            state.revision,
            state.turn_ids,
            state.tokens_estimated,
        ),
    )
    transcript.take_new_originals()
    return transcript


def recovered_state(recovered: RecoveredTranscript) -> TranscriptState:
    """A transcript's state from its journal rows (``StoreError``-worthy rows raise
    ``msgspec.DecodeError``/``ValidationError``)."""
    header = _decode_header(recovered.header)
    try:
        return TranscriptState(
            tuple(recovered.messages),
            header.summary,
            header.total_tokens,
            tuple(recovered.originals),
            header.counters,
            header.revision,
            header.turn_ids,
            header.tokens_estimated,
        )
    except ValueError as error:
        raise msgspec.ValidationError(f"not an OpenAI chat message: {error}") from None


class TranscriptActor(Agent):
    """One participant's transcript (a keyed kind: one instance per participant).

    With ``store`` every applied write is journaled (under ``name``) before it is
    acknowledged; ``recovered`` is the journal's state of this participant. A ``clear``
    empties it (and its journal rows) and retires the instance once its mailbox is
    idle, so a departed participant leaves no actor behind (as the dialogue sections do).
    ``on_retired(participant)`` is told when an instance holding journaled state stops
    (retired over the keyed bound), so the next instance reads it back from the journal.
    """

    def __init__(
        self,
        participant_id: str,
        kind: str = "",
        *,
        name: str = "",
        store: ContextStore | None = None,
        recovered: TranscriptState | None = None,
        on_retired: Callable[[str], None] | None = None,
    ) -> None:
        self.participant_id = participant_id
        self._on_retired = on_retired
        self.kind = kind
        self.store_name = name
        self.store = store
        self.transcript = Transcript() if recovered is None else restore(recovered)
        self._retiring: asyncio.Task[None] | None = None
        """The retirement after a clear: held, as the loop keeps only weak references to tasks."""
        # What the journal holds of this transcript: messages, originals (by call id).
        journaled = recovered is not None
        self._journaled_messages = self.transcript.committed if journaled else 0
        self._journaled_originals = {call_id for call_id, _ in self.transcript.originals()}
        self._original_position = len(self._journaled_originals)
        self._reset = not journaled
        self._cleared = False
        self.journal_failures = 0

    async def on_write(self, message: TranscriptWrite, ctx: RuntimeContext) -> TranscriptAck:
        transcript = self.transcript
        if message.kind == "append" and message.base != transcript.revision:
            return TranscriptAck(False, transcript.revision)
        if message.kind != "append":
            self._reset = True
        apply_write(transcript, message)
        self._cleared = message.kind == "clear"  # until a later write starts a new one
        journaled = await self._journal()
        if message.kind == "clear" and self.kind:
            # Only now: retiring cancels a handler in flight, and this one must answer
            # (the departed participant's forget waits for it).
            self._retiring = asyncio.create_task(self._retire_when_idle())
        return TranscriptAck(True, transcript.revision, journaled)

    async def _journal(self) -> bool:
        """Have the store commit this change; True once it is in the journal."""
        store = self.store
        if store is None or not store.open:
            self.transcript.take_new_originals()
            return False
        store.schedule(self)
        await store.barrier()
        return store.open

    def stage(self, store: ContextStore) -> tuple[list[Callable[[], None]], Callable[[], None]]:
        """The journal's commit: stage what changed since the last commit (``Journaled``)."""
        transcript, key = self.transcript, (self.participant_id, self.store_name)
        new = transcript.take_new_originals()
        if self._cleared:
            store.delete_transcript(*key)
            self._journaled_messages, self._journaled_originals = 0, set()
            self._reset = False
            return [], self._failed
        held = {call_id for call_id, _ in transcript.originals()}
        if self._reset:
            added = list(transcript.originals())
            dropped: list[str] = []
            start = 0
        else:
            added = [(call_id, text) for call_id, text in new if call_id in held]
            dropped = sorted(self._journaled_originals - held)
            start = self._journaled_messages
        rows = []
        for call_id, text in added:
            rows.append((call_id, self._original_position, text))
            self._original_position += 1
        header = TranscriptHeader(
            transcript.summary,
            transcript.total_tokens,
            TranscriptCounters.of(transcript.counters),
            transcript.revision,
            tuple(transcript.turn_ids),
            transcript.tokens_estimated,
        )
        store.put_transcript(
            *key,
            _encode(header),
            [_encode(m) for m in transcript.messages[start:]],
            start,
            rows,
            dropped,
            reset=self._reset,
        )
        self._journaled_messages = transcript.committed
        self._journaled_originals = held
        self._reset = False
        return [], self._failed

    def _failed(self) -> None:
        """The commit failed: the next one rewrites the whole transcript (or deletes it
        again, after a clear); the store retries it."""
        self.journal_failures += 1
        self._reset = True

    async def _retire_when_idle(self) -> None:
        runtime = self.runtime
        if runtime is None or not runtime.running or self.transcript.committed:
            return
        if runtime.metrics().actors.get(self.name, 0):
            return  # a write arrived after the clear: it starts a new transcript here
        await runtime.retire(self.kind, self.participant_id)

    async def on_load(self, message: TranscriptLoad, ctx: RuntimeContext) -> TranscriptState:
        return state_of(self.transcript)

    async def on_stop(self) -> None:
        """Retired (or the runtime stops): a later instance reads the journal again."""
        if self._on_retired is not None and not self._cleared and self.transcript.revision:
            self._on_retired(self.participant_id)

    def gauges(self) -> dict[str, float]:
        return {
            "transcript_messages": self.transcript.committed,
            "transcript_journal_failures": self.journal_failures,
        }


def _decoded(
    rows: RecoveredTranscript, kind: str, pid: str, store: ContextStore, name: str
) -> TranscriptState | None:
    """The state of a journaled transcript; None for one that does not decode, whose rows
    are quarantined (``ContextStore.quarantine_transcript``) and which starts empty."""
    try:
        return recovered_state(rows)
    except (msgspec.DecodeError, msgspec.ValidationError) as error:
        get_logger(actor=kind, participant=pid).error(
            "tools.transcript_unreadable",
            path=str(store.path),
            error=str(error),
            action="quarantined in the journal; starting this transcript empty",
        )
        store.quarantine_transcript(pid, name, f"corrupt transcript ({error})")
        return None


def register_transcripts(
    runtime: AgentRuntime,
    name: str,
    *,
    shard: int = 0,
    shards: int = 1,
    store: ContextStore | None = None,
    max_instances: int | None = None,
) -> None:
    """Host the transcripts of store ``name`` (this process's shard of the participants),
    journaled in ``store`` (the context process's journal) and restored from it: at the
    first message of each participant the journal held at start, and when an instance
    retired over ``max_instances`` (the keyed bound) is needed again."""
    topics = TranscriptTopics.of(name)
    kind = f"{name}.transcripts"
    recovered: dict[str, TranscriptState] = {}
    retired: set[str] = set()
    if store is not None:
        for pid, store_name in [key for key in store.transcripts if key[1] == name]:
            state = _decoded(store.transcripts.pop((pid, store_name)), kind, pid, store, name)
            if state is not None:
                recovered[pid] = state
    if recovered:
        get_logger(actor=kind).info("tools.transcripts_recovered", transcripts=len(recovered))

    def factory(key: str) -> TranscriptActor:
        state = recovered.pop(key, None)
        if state is None and key in retired and store is not None and store.open:
            retired.discard(key)
            rows = store.read_transcript(key, name)  # rare: only after a retirement
            state = None if rows is None else _decoded(rows, kind, key, store, name)
        return TranscriptActor(
            key, kind, name=name, store=store, recovered=state, on_retired=retired.add
        )

    runtime.register_keyed(
        kind,
        TranscriptActor,
        factory=factory,
        shard=shard,
        shards=shards,
        handlers={topics.write: TranscriptActor.on_write, topics.load: TranscriptActor.on_load},
        max_instances=max_instances,
    )
