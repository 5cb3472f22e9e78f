"""The participants' transcripts a ``ToolAgent`` holds, and their mirror in the store.

``TranscriptMirror`` holds each participant's ``Transcript`` (the least recently used
beyond ``MAX_PARTICIPANTS`` is dropped, and counted: ``evicted``) and a lock per
participant that a turn, a manual compaction and a resync take, so a transcript is never
written in the middle of a turn.

With a store (``TranscriptTopics``, see ``store``) the transcript outlives the agent's
process: a transcript not held here is loaded from the store (``load``); after a turn or
a compaction, ``mirror`` sends the store what changed (the turn's messages, or the whole
transcript after a rewrite or when the store may have missed a write). A write is sent at
once, so writes and loads keep their order; its answer is awaited in a task of its own.
A refusal or no answer is counted (``refused``) and resyncs: the whole transcript is sent
again after each ``RESYNC_DELAYS_S`` while the store stays silent and no newer write
went out. ``forget`` drops a participant here and in the store.
"""

from __future__ import annotations

import asyncio
from collections import OrderedDict
from typing import Any

from xrmq.actors.runtime import ReplyStream, RuntimeClosedError, get_logger

from .store import (
    RESYNC_DELAYS_S,
    TranscriptAck,
    TranscriptLoad,
    TranscriptState,
    TranscriptTopics,
    TranscriptWrite,
    restore,
    wire_messages,
    write_of,
)
from .transcript import Transcript

MAX_PARTICIPANTS = 10_000
"""Transcripts held at most; the least recently used beyond it is dropped, and counted."""


class TranscriptMirror:
    """See the module docstring. ``runtime`` asks the store (``store`` None: no store);
    ``timeout_s`` bounds a load and each write's wait for its answer."""

    def __init__(self, runtime: Any, store: TranscriptTopics | None, *, timeout_s: float) -> None:
        self.runtime = runtime
        self.store = store
        self.timeout_s = timeout_s
        self._transcripts: OrderedDict[str, Transcript] = OrderedDict()
        self._locks: dict[str, asyncio.Lock] = {}
        self.evicted = 0
        """Transcripts dropped because more than ``MAX_PARTICIPANTS`` were held."""
        self.refused = 0
        """Writes the store refused or left unanswered (each followed by a resync)."""
        self._acks: set[asyncio.Task[None]] = set()

    def transcript(self, participant_id: str) -> Transcript:
        """The participant's transcript (created on first use)."""
        transcript = self._transcripts.get(participant_id)
        if transcript is None:
            transcript = self._transcripts[participant_id] = Transcript()
            while len(self._transcripts) > MAX_PARTICIPANTS:
                dropped, _ = self._transcripts.popitem(last=False)
                self._locks.pop(dropped, None)
                self.evicted += 1
        else:
            self._transcripts.move_to_end(participant_id)
        return transcript

    def lock(self, participant_id: str) -> asyncio.Lock:
        """The participant's lock: one turn, compaction or resync at a time."""
        lock = self._locks.get(participant_id)
        if lock is None:
            lock = self._locks[participant_id] = asyncio.Lock()
        return lock

    async def load(self, pid: str, log: Any) -> Transcript:
        """The participant's transcript: held here, else loaded from the store."""
        if pid in self._transcripts or self.store is None:
            return self.transcript(pid)
        try:
            state = await self.runtime.ask(
                self.store.load,
                TranscriptLoad(),
                reply_type=TranscriptState,
                participant_id=pid,
                timeout=self.timeout_s,
            )
        except Exception as error:  # the store is not up: this turn starts afresh, say so
            log.warning("tools.transcript_load_failed", error=f"{type(error).__name__}: {error}")
            # Not held, so never mirrored (a write would replace the stored transcript);
            # the next turn loads again.
            return Transcript()
        self.transcript(pid)
        restored = self._transcripts[pid] = restore(state)
        return restored

    def mirror(
        self, pid: str, transcript: Transcript, turn_messages: list[Any]
    ) -> asyncio.Future[None] | None:
        """Send the store what changed: the whole transcript after a rewrite or when the
        store may have missed a write (``resync``), else the turn. A transcript this agent
        does not hold (its load failed) is not mirrored. Returns what resolves once the
        store first answered the write (None when nothing was sent)."""
        if self.store is None or self._transcripts.get(pid) is not transcript:
            return None
        rewritten = transcript.take_rewritten()
        new_originals = transcript.take_new_originals()
        new_turns = transcript.take_new_turn_ids()
        if transcript.resync:
            transcript.resync = False
            write = write_of(
                transcript, "replace", wire_messages(transcript.messages), transcript.originals()
            )
        elif rewritten:
            write = write_of(
                transcript, "replace", wire_messages(transcript.messages), new_originals
            )
        else:
            write = write_of(
                transcript, "append", wire_messages(turn_messages), new_originals, new_turns
            )
        return self._write(pid, write, transcript)

    async def forget(self, participant_id: str) -> None:
        """Forget the participant's transcript here and in the store: return once the store
        cleared it; ``TimeoutError`` naming the store when it did not answer in time (this
        process forgot it all the same)."""
        self._transcripts.pop(participant_id, None)
        self._locks.pop(participant_id, None)
        if self.store is None or not getattr(self.runtime, "running", False):
            return
        answer = await _first(self._ask(participant_id, TranscriptWrite("clear", ())))
        if isinstance(answer, Exception):
            name = self.store.write.name.removesuffix(".transcript.write")
            raise TimeoutError(
                f"the transcript store {name!r} did not forget {participant_id}: "
                f"{type(answer).__name__}: {answer}"
            )

    async def mirrored(self) -> None:
        """Return once every transcript write sent so far was answered (or given up)."""
        while self._acks:
            await asyncio.gather(*list(self._acks), return_exceptions=True)

    def close(self) -> None:
        """Stop waiting for the writes' answers (and resyncing)."""
        for task in list(self._acks):
            task.cancel()

    def _write(
        self, pid: str, write: TranscriptWrite, transcript: Transcript | None
    ) -> asyncio.Future[None] | None:
        """Ask the store to apply ``write`` (sent now, so writes and loads keep their
        order); a refusal or no answer resyncs ``transcript``. Returns what resolves once
        the store first answered (or did not, in time)."""
        if self.store is None or not getattr(self.runtime, "running", False):
            return None
        answered: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        task = asyncio.create_task(
            self._acknowledged(pid, write, transcript, self._ask(pid, write), answered),
            name=f"xrmq-transcript-write-{pid}",
        )
        self._acks.add(task)
        task.add_done_callback(self._acks.discard)
        task.add_done_callback(lambda _: _resolve(answered))
        return answered

    def _ask(self, pid: str, write: TranscriptWrite) -> ReplyStream[TranscriptAck] | Exception:
        """Send ``write`` to the store now; its reply stream, or why it could not be sent."""
        assert self.store is not None
        try:
            return self.runtime.ask_stream(
                self.store.write,
                write,
                reply_type=TranscriptAck,
                participant_id=pid,
                timeout=self.timeout_s,
            )
        except (RuntimeClosedError, ValueError) as error:  # stopping, or over the message limit
            return error

    async def _acknowledged(
        self,
        pid: str,
        write: TranscriptWrite,
        transcript: Transcript | None,
        sent: ReplyStream[TranscriptAck] | Exception,
        answered: asyncio.Future[None],
    ) -> None:
        """Await the store's answer to ``write``; while it refuses or stays silent and no
        newer write went out, re-send the whole transcript after each ``RESYNC_DELAYS_S``."""
        for attempt, delay in enumerate((0.0, *RESYNC_DELAYS_S)):
            if attempt:
                await asyncio.sleep(delay)  # a backoff: the store's process is restarting
                if not self._resync_due(pid, write, transcript):
                    return
                assert transcript is not None
                async with self.lock(pid):  # never in the middle of a turn
                    if not self._resync_due(pid, write, transcript):
                        return
                    transcript.resync = False
                    write = write_of(
                        transcript,
                        "replace",
                        wire_messages(transcript.messages),
                        transcript.originals(),
                    )
                    sent = self._ask(pid, write)
            reason = _refusal(await _first(sent))
            _resolve(answered)
            if reason is None:
                return
            self.refused += 1
            get_logger(actor="tools.transcripts", participant=pid).info(
                "tools.transcript_resync", revision=write.revision, reason=reason
            )
            if transcript is None:
                return
            transcript.resync = True  # the next write sends the whole transcript
            if transcript.revision != write.revision:
                return  # a newer write is out: it (or its own retries) carries the resync

    def _resync_due(self, pid: str, write: TranscriptWrite, transcript: Transcript | None) -> bool:
        """Whether ``write`` is still the participant's latest and the store needs it all."""
        return (
            transcript is not None
            and self._transcripts.get(pid) is transcript
            and transcript.revision == write.revision
            and transcript.resync
        )


def _resolve(future: asyncio.Future[None]) -> None:
    if not future.done():
        future.set_result(None)


async def _first(sent: ReplyStream[TranscriptAck] | Exception) -> TranscriptAck | Exception:
    """The store's answer to a write: its acknowledgement, or the failure."""
    if isinstance(sent, Exception):
        return sent
    async with sent:
        try:
            async for ack in sent:
                return ack
        except asyncio.CancelledError:
            raise
        except Exception as error:  # the store is down or restarting
            return error
    return RuntimeClosedError("no answer")


def _refusal(answer: TranscriptAck | Exception) -> str | None:
    """Why the store did not apply a write; None when it did."""
    if isinstance(answer, Exception):
        return f"{type(answer).__name__}: {answer}"
    return None if answer.applied else f"refused: the store is at revision {answer.revision}"
