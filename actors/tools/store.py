"""Transcripts held by a keyed actor: ``TranscriptActor`` and the messages that keep it current.

A ``ToolAgent`` given a ``transcripts`` name works on a local copy of each participant's
transcript and mirrors every change to a keyed actor (one instance per participant,
sharded like the context sections, typically in the context process): after a turn
commits, ``append`` carries the turn's messages; after a compaction rewrote the
transcript, ``replace`` carries all of it. The reclaimed originals stored since the last
write travel with either. A ``ToolAgent`` that does not hold a participant's transcript
(a new process, a restart) loads it from the actor with an ask. So the transcript
outlives the agent's process; journaling it to disk belongs to the durable-context
store, which can journal these same writes.

Topics for store NAME: ``NAME.transcript.write`` (``TranscriptWrite``, published) and
``NAME.transcript.load`` (``TranscriptLoad`` -> ``TranscriptState``, an ask); the
participant is in the envelope.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from typing import Literal

import msgspec

from xrmq.actors.models import ChatMessage
from xrmq.actors.runtime import Agent, AgentRuntime, RuntimeContext
from xrmq.schemas._validation import check_name
from xrmq.topics import Topic

from .transcript import Transcript


class TranscriptWrite(msgspec.Struct, frozen=True):
    """One change: ``append`` the turn's messages, ``replace`` them all (after a
    compaction), or ``clear`` the transcript (the participant left)."""

    kind: Literal["append", "replace", "clear"]
    messages: tuple[ChatMessage, ...]
    summary: str | None = None
    total_tokens: int | None = None
    originals: tuple[tuple[str, str], ...] = ()
    """Reclaimed originals stored since the previous write, oldest first."""
    tool_rounds: int = 0
    summary_rounds: int = 0


class TranscriptLoad(msgspec.Struct, frozen=True):
    """Ask for the participant's whole transcript."""


class TranscriptState(msgspec.Struct, frozen=True):
    """A participant's whole transcript."""

    messages: tuple[ChatMessage, ...] = ()
    summary: str | None = None
    total_tokens: int | None = None
    originals: tuple[tuple[str, str], ...] = ()
    tool_rounds: int = 0
    summary_rounds: int = 0


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
        transcript.messages = list(write.messages)
        transcript.summary = write.summary
    else:
        transcript.messages.extend(write.messages)
    transcript.total_tokens = write.total_tokens
    transcript.counters.tool_rounds = write.tool_rounds
    transcript.counters.summary_rounds = write.summary_rounds
    transcript.store_originals(write.originals)


def state_of(transcript: Transcript) -> TranscriptState:
    return TranscriptState(
        tuple(transcript.messages),
        transcript.summary,
        transcript.total_tokens,
        transcript.originals(),
        transcript.counters.tool_rounds,
        transcript.counters.summary_rounds,
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
            state.tool_rounds,
            state.summary_rounds,
        ),
    )
    transcript.take_new_originals()
    return transcript


class TranscriptActor(Agent):
    """One participant's transcript (a keyed kind: one instance per participant).

    A ``clear`` empties it and retires the instance once its mailbox is idle, so a
    departed participant leaves no actor behind (as the dialogue sections do).
    """

    def __init__(self, participant_id: str, kind: str = "") -> None:
        self.participant_id = participant_id
        self.kind = kind
        self.transcript = Transcript()
        self._retiring: asyncio.Task[None] | None = None
        """The retirement after a clear: held, as the loop keeps only weak references to tasks."""

    async def on_write(self, message: TranscriptWrite, ctx: RuntimeContext) -> None:
        apply_write(self.transcript, message)
        self.transcript.take_new_originals()
        if message.kind == "clear" and self.kind:
            self._retiring = asyncio.create_task(self._retire_when_idle())

    async def _retire_when_idle(self) -> None:
        runtime = self.runtime
        if runtime is None or not runtime.running or self.transcript.messages:
            return
        if runtime.metrics().actors.get(self.name, 0):
            return  # a write arrived after the clear: it starts a new transcript here
        await runtime.retire(self.kind, self.participant_id)

    async def on_load(self, message: TranscriptLoad, ctx: RuntimeContext) -> TranscriptState:
        return state_of(self.transcript)

    def gauges(self) -> dict[str, float]:
        return {"transcript_messages": len(self.transcript.messages)}


def register_transcripts(
    runtime: AgentRuntime, name: str, *, shard: int = 0, shards: int = 1
) -> None:
    """Host the transcripts of store ``name`` (this process's shard of the participants)."""
    topics = TranscriptTopics.of(name)
    kind = f"{name}.transcripts"
    runtime.register_keyed(
        kind,
        TranscriptActor,
        factory=lambda key: TranscriptActor(key, kind),
        shard=shard,
        shards=shards,
        handlers={topics.write: TranscriptActor.on_write, topics.load: TranscriptActor.on_load},
    )
