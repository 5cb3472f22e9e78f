"""One participant's realtime session: the I/O shell around the pure cores.

``RealtimeSession`` drives a ``RealtimeProvider`` with the ``RolloverMachine``
(epochs, backlog, boundary, policy), a ``PressureTracker`` per connection and a
``Checkpointer`` over the participant's ``LiveTranscript``, which a ``TurnRecorder``
(``turns``) fills from the provider's events. It performs the machine's effects in order
under one lock, so input reaches each session in the order it was given; a connect runs
in a task of its own (input keeps being buffered meanwhile). The tasks it starts, the
background checkpoint and the condition its waiters wait on are its ``SessionWork``
(``background``); what each rollover took is its ``RolloverHistory`` (``history``).

After every completed response the pressure is read: from ``compress_at`` a background
checkpoint starts (the older prefix summarized by ``summarize``, e.g. the compaction
workers' ``WorkerSummarizer``; a candidate whose snapshot changed is discarded and
retried); from ``rollover_at``, or when the session's lifetime is nearly over, the
rollover is requested and happens at the next safe boundary. Every (re)connect is seeded
with ``instructions()`` (read then: the shared context as it is now), the latest
checkpoint's summary, and the retained tail plus everything said after the snapshot.

From ``prepare_at`` a standby session is opened and kept up to date in the background
(``standby``) where the provider allows two at once; the rollover then switches to it at
the boundary (no connect on the critical path), else connects as above.

``settled()`` returns once that background work (a checkpoint, a requested rollover)
is over: what the next session is seeded with depends on it.

Events of a connection that is no longer current (a late ``response.done`` or error of a
closed session) are dropped and counted (``counts["stale_events"]``). Each rollover's
phases (boundary wait, connect to ready, replay) are kept in ``rollovers`` (the last
``MAX_RECORDS``, ``history``) and logged as ``realtime.rollover``.
"""

from __future__ import annotations

import asyncio
import time
from collections import Counter
from collections.abc import Callable
from functools import partial

from xrmq.actors.runtime import get_logger

from .background import SessionWork, Summarize
from .checkpoint import Checkpointer, LiveTranscript
from .history import RolloverHistory
from .pressure import LIFETIME, PressureTracker
from .provider import (
    AudioDelta,
    Disconnected,
    InputCommitted,
    InputTranscript,
    ItemTruncated,
    OutputItem,
    ProviderError,
    RealtimeConnectError,
    RealtimeConnection,
    RealtimeEvent,
    RealtimeProvider,
    ResponseDone,
    ResponseStarted,
    SpeechStarted,
    SpeechStopped,
    TranscriptDelta,
)
from .rollover import (
    Close,
    Connect,
    Effect,
    GiveUp,
    InputItem,
    MachineSettings,
    Overflowed,
    Phase,
    RolloverMachine,
    Send,
)
from .seed import SUMMARY_HEADER as SUMMARY_HEADER  # where the tests and callers read it
from .seed import session_seed
from .settings import SessionListener, SessionSettings
from .standby import Slot, Standby
from .turns import TurnRecorder


class RealtimeSession:
    """See the module docstring. ``start()`` once, then feed input; ``close()`` at the end."""

    def __init__(
        self,
        provider: RealtimeProvider,
        *,
        instructions: Callable[[], str],
        summarize: Summarize | None = None,
        settings: SessionSettings | None = None,
        listener: SessionListener | None = None,
        participant_id: str = "",
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.provider = provider
        self.settings = SessionSettings() if settings is None else settings
        machine_settings = self.settings.machine
        if not provider.proactive_rollover and machine_settings.policy == "proactive":
            machine_settings = MachineSettings(
                policy="natural",
                backlog_items=machine_settings.backlog_items,
                overflow=machine_settings.overflow,
                connect_attempts=machine_settings.connect_attempts,
            )
        self.machine = RolloverMachine(machine_settings)
        self.transcript = LiveTranscript()
        self.checkpointer = Checkpointer(self.transcript, keep_tail=self.settings.keep_tail)
        self.tracker = PressureTracker(provider.limits, self.settings.pressure)
        self.listener = SessionListener() if listener is None else listener
        self.participant_id = participant_id
        self.log = get_logger(actor="realtime", participant=participant_id)
        self.turns = TurnRecorder(self.transcript, sample_rate=provider.sample_rate)
        self.history = RolloverHistory(self.log, clock)
        self.rollovers = self.history.records
        """The last rollovers and their phases (``RolloverRecord``)."""
        self._instructions = instructions
        self._clock = clock
        self._lock = asyncio.Lock()
        self.work = SessionWork(
            self._lock,
            summarize=summarize,
            attempts=self.settings.checkpoint_attempts,
            counts=self.machine.counts,
            log=self.log,
        )
        self._connections: dict[int, RealtimeConnection] = {}
        self._ready = asyncio.Event()
        self._failure: str | None = None
        self._replay_s = 0.0
        self._replayed = 0
        self._watch = 0
        """The generation of the boundary watch (one per scheduled rollover)."""
        self.standby = Standby(
            provider,
            machine=self.machine,
            work=self.work,
            lock=self._lock,
            log=self.log,
            clock=clock,
            checkpointer=lambda: self.checkpointer,
            make_seed=lambda: session_seed(
                self._instructions(), self.checkpointer, self.settings.server_vad
            ),
            forward=self._event,
            attempts=self.settings.standby_attempts,
        )

    # -- public ----------------------------------------------------------------------

    @property
    def counts(self) -> Counter[str]:
        return self.machine.counts

    @property
    def epoch(self) -> int:
        return self.machine.epoch

    @property
    def phase(self) -> Phase:
        return self.machine.phase

    async def start(self) -> None:
        """Open the first session; returns once it is ready (raises if every attempt failed)."""
        async with self._lock:
            await self._perform(self.machine.start())
        await self._ready.wait()
        if self._failure is not None:
            raise RealtimeConnectError(self._failure)

    async def send_audio(self, pcm: bytes, seq: int) -> None:
        seconds = len(pcm) / 2 / self.provider.sample_rate
        await self._input(InputItem("audio", seq, data=pcm, seconds=seconds))

    async def commit(self, seq: int) -> None:
        """End the user's audio turn (client turn detection) and ask for the response."""
        await self._input(InputItem("commit", seq))

    async def send_text(self, text: str, seq: int) -> None:
        """A text turn: the user message, then a response."""
        await self._input(InputItem("text", seq, text=text))

    async def playback(self, playing: bool) -> None:
        async with self._lock:
            await self._perform(self.machine.playback(playing))

    async def tools(self, pending: int) -> None:
        async with self._lock:
            await self._perform(self.machine.tools(pending))

    async def cancel_response(self) -> None:
        """Barge-in: ask the current session to stop the response in progress."""
        async with self._lock:
            connection = self._connections.get(self.machine.epoch)
            if connection is None or not self.machine.boundary.response_active:
                return
            try:
                await connection.cancel_response()
            except Exception as error:  # the connection died: its Disconnected event follows
                self.log.warning("realtime.cancel_failed", error=repr(error))
            self.counts["cancelled_responses"] += 1

    async def truncate(self, response_id: str, audio_end_ms: int) -> None:
        """Barge-in: the participant heard response ``response_id`` only up to
        ``audio_end_ms``. The provider is told (``conversation.item.truncate``) and the
        transcript keeps only the words heard (``TurnRecorder.heard``), now or when the
        response ends, so the next checkpoint and seed hold what was heard, not what was
        generated."""
        async with self._lock:
            cut = self.turns.cut(response_id, audio_end_ms)
            connection = self._connections.get(self.machine.epoch)
            if cut.item_id is not None and connection is not None and cut.current(self.epoch):
                try:
                    await connection.truncate(cut.item_id, cut.end_ms)
                except Exception as error:  # the connection died: its Disconnected follows
                    self.log.warning("realtime.truncate_failed", error=repr(error))
                self.counts["truncated_responses"] += 1
            self.turns.heard(cut)
            await self.standby.sync()  # a standby holding the uncut answer is reopened now

    async def request_rollover(self, reason: str) -> None:
        """Roll over at the next safe boundary with a fresh checkpoint (under the
        ``natural`` policy: keep it for the next disconnect); returns once the checkpoint
        was committed or failed."""
        await self._want_rollover(reason)
        await self.work.checkpointed()

    async def wait_streaming(self, epoch: int) -> None:
        """Return once a session of ``epoch`` or later is ready (or this one gave up)."""
        await self.wait_for(
            lambda: (
                self._failure is not None
                or self.machine.phase is Phase.CLOSED
                or (self.machine.epoch >= epoch and self.machine.phase is Phase.STREAMING)
            )
        )

    async def settled(self) -> None:
        """Return once the background work started by what the session has handled so
        far is over: no checkpoint is being summarized, and no rollover is requested,
        waiting for its boundary or connecting (the current session streams).

        A response's end may start a checkpoint or request a rollover that finishes
        later, so what the next session is seeded with depends on when the next turn
        comes; a caller that needs a deterministic sequence (a test, a benchmark, a
        shutdown that keeps the latest checkpoint) awaits this between turns. A rollover
        whose boundary never comes is given up after ``boundary_wait_s``, which ends the
        wait too; a session that is closed, gave up or never started is settled. Not from
        a ``SessionListener`` callback: those run under the session's lock.
        """
        async with self._lock:  # the event in hand (a response's end) finishes what it starts
            pass
        await self.wait_for(self._settled)

    def _settled(self) -> bool:
        machine = self.machine
        if machine.phase in (Phase.IDLE, Phase.FAILED, Phase.CLOSED):
            return True
        return machine.phase is Phase.STREAMING and machine.scheduled is None and not self.work.busy

    async def wait_for(self, predicate: Callable[[], bool]) -> None:
        """Return once ``predicate()`` holds, re-checked whenever the session's state or
        counters may have changed (after each provider event, a session ready, a rollover
        given up)."""
        await self.work.wait_for(predicate)

    def pressure(self) -> float:
        return self.tracker.pressure().value

    async def close(self) -> None:
        async with self._lock:
            await self._perform(self.machine.close())
            await self.standby.close()
        await self.work.cancel()
        self._ready.set()

    async def forget(self) -> None:
        """Close the session and drop all it holds of the participant (they left, or asked
        to be forgotten): the checkpoint being summarized is cancelled, so nothing of
        theirs is summarized afterwards; the checkpoints, the transcript, the input
        backlog and the partial texts are dropped, so nothing can seed a session again."""
        await self.work.drop_checkpoint()
        await self.close()
        self.machine.backlog.clear()
        self.transcript = LiveTranscript()
        self.checkpointer = Checkpointer(self.transcript, keep_tail=self.settings.keep_tail)
        self.turns.forget(self.transcript)
        self.log.info("realtime.forgotten")

    # -- input and effects ---------------------------------------------------------------

    async def _input(self, item: InputItem) -> None:
        async with self._lock:
            await self._perform(self.machine.input(item))

    async def _perform(self, effects: list[Effect]) -> None:
        """Carry out ``effects`` in order; the caller holds the lock."""
        replay_started: float | None = None
        replayed = 0
        for effect in effects:
            if isinstance(effect, Send):
                if effect.replayed and replay_started is None:
                    replay_started = self._clock()
                replayed += effect.replayed
                await self._send(effect)
            elif isinstance(effect, Close):
                connection = self._connections.pop(effect.epoch, None)
                if self.machine.phase is not Phase.STREAMING:  # a switch timed itself
                    self.history.closing()
                if connection is not None:
                    self.work.spawn(connection.close())
            elif isinstance(effect, Connect) and effect.reason == "standby":
                await self._switch(effect)
            elif isinstance(effect, Connect):
                if effect.reason == "rollover":
                    self.standby.fallback()
                self.work.spawn(self._connect(effect))
            elif isinstance(effect, Overflowed):
                self.log.warning(
                    "realtime.backlog_overflow",
                    policy=effect.policy,
                    dropped_seq=effect.dropped.seq,
                    overflow=self.counts["overflow"],
                )
            elif isinstance(effect, GiveUp):
                self._failure = effect.reason
                self.log.error("realtime.gave_up", reason=effect.reason, dropped=effect.dropped)
                self._ready.set()
                await self.listener.failed(effect.reason)
        if replay_started is not None:
            self._replay_s = self._clock() - replay_started
            self._replayed = replayed

    async def _send(self, effect: Send) -> None:
        connection = self._connections.get(effect.epoch)
        if connection is None:
            return
        item = effect.item
        try:
            if item.kind == "audio":
                await connection.append_audio(item.data)
                self.tracker.add_audio(item.seconds)
            elif item.kind == "commit":
                await connection.commit()
                await connection.create_response()
            else:
                self.turns.text_sent(item.text)
                self.tracker.add_transcript(item.text)
                await connection.send_text(item.text)
                await connection.create_response()
        except Exception as error:  # the connection died: its Disconnected event follows
            self.counts["send_failures"] += 1
            self.log.warning("realtime.send_failed", epoch=effect.epoch, error=repr(error))

    async def _connect(self, effect: Connect) -> None:
        if effect.reason == "retry":
            retries = self.counts["connect_failures"]
            await asyncio.sleep(self.settings.retry_backoff_s * 2 ** max(0, retries - 1))
        if effect.reason != "start":
            await self.work.checkpointed()
        seed = session_seed(self._instructions(), self.checkpointer, self.settings.server_vad)
        started = self._clock()
        try:
            connection = await self.provider.connect(seed)
        except RealtimeConnectError as error:
            self.log.warning(
                "realtime.connect_failed",
                epoch=effect.epoch,
                reason=effect.reason,
                error=str(error),
            )
            async with self._lock:
                await self._perform(self.machine.connect_failed(effect.epoch))
            await self.work.notify()  # a retry's wait, or the session gave up
            return
        async with self._lock:
            if self.machine.epoch != effect.epoch or self.machine.phase is Phase.CLOSED:
                self.work.spawn(connection.close())
                return
            self.work.spawn(self._pump(effect.epoch, connection))
            seeded = seed.instructions + " ".join(item.text for item in seed.items)
            await self._install(effect.epoch, connection, seeded, len(seed.items), started)
        await self.work.notify()

    async def _switch(self, effect: Connect) -> None:
        """Make before break, under the lock: session ``effect.epoch`` is the standby,
        connected and seeded already; one lost at the last moment is connected anew."""
        started = self._clock()
        self.history.closing()
        slot: Slot | None = await self.standby.take(effect.epoch)
        if slot is None or slot.connection is None:
            self.standby.fallback()
            self.work.spawn(self._connect(Connect(effect.epoch, "rollover")))
            return
        held = slot.mirror.held
        seeded = slot.seed.instructions + " ".join(message.text for message in held)
        await self._install(
            effect.epoch, slot.connection, seeded, len(held), started, slot.connected_at
        )
        self.standby.last_switch_s = self._clock() - started
        switch_s, added = round(self.standby.last_switch_s, 4), len(held) - slot.mirror.seeded
        self.log.info("realtime.standby_switch", epoch=effect.epoch, switch_s=switch_s, added=added)

    async def _install(
        self,
        epoch: int,
        connection: RealtimeConnection,
        seeded: str,
        seeded_items: int,
        started: float,
        opened_at: float | None = None,
    ) -> None:
        """Under the lock: session ``epoch`` (its events pumped) is ready on ``connection``,
        seeded with ``seeded``, opened at ``opened_at`` (None: now); replay the backlog."""
        self._connections[epoch] = connection
        self.tracker = PressureTracker(
            self.provider.limits,
            self.settings.pressure,
            started_at=self._clock() if opened_at is None else opened_at,
            seeded_text=seeded,
        )
        self.turns.new_session()
        phase = self.machine.phase
        backlog = len(self.machine.backlog)
        ready_at = self._clock()
        self._replay_s, self._replayed = 0.0, 0
        await self._perform(self.machine.ready(epoch))
        if phase is Phase.ROLLING:
            self.history.check_effective(
                self.tracker.pressure(),
                self.settings.pressure.rollover_at,
                machine=self.machine,
                checkpointer=self.checkpointer,
                seeded_items=seeded_items,
            )
        self.history.ready(
            self.machine,
            epoch=epoch,
            phase=phase,
            started=started,
            ready_at=ready_at,
            replay_s=self._replay_s,
            backlog=backlog,
            seeded_items=seeded_items,
        )
        self._ready.set()

    # -- provider events ---------------------------------------------------------------------

    async def _pump(self, epoch: int, connection: RealtimeConnection) -> None:
        async for event in connection.events():
            await self._event(epoch, event)

    async def _event(self, epoch: int, event: RealtimeEvent) -> None:
        """One event of session ``epoch``; a message it completed goes to the standby."""
        async with self._lock:
            try:
                await self._on_event(epoch, event)
                if isinstance(event, (ResponseDone, InputTranscript)):
                    await self.standby.sync()
            except Exception as error:  # a listener's bug must not stop the session
                self.counts["event_failures"] += 1
                self.log.exception(
                    "realtime.event_failed",
                    epoch=epoch,
                    kind=type(event).__name__,
                    error=repr(error),
                )
        await self.work.notify()

    async def _on_event(self, epoch: int, event: RealtimeEvent) -> None:
        if isinstance(event, Disconnected) and event.by_client:
            return  # the close of a session we replaced or closed: expected
        if not self.machine.accept(epoch):
            return
        machine, turns = self.machine, self.turns
        if isinstance(event, SpeechStarted):
            await self._perform(machine.user_turn(True))
            await self.listener.speech_started()
        elif isinstance(event, SpeechStopped):
            pass
        elif isinstance(event, InputCommitted):
            self.tracker.add_turn()
            turns.user_committed()
            if self.settings.server_vad:  # the provider answers a turn it detected
                machine.boundary.response_active = True
            await self._perform(machine.user_turn(False))
        elif isinstance(event, InputTranscript):
            turns.user_transcript(event.text)
            self.tracker.add_transcript(event.text)
            await self.listener.user_text(event.text)
        elif isinstance(event, ResponseStarted):
            turns.response_started(event.response_id)
            await self._perform(machine.response(True))
        elif isinstance(event, OutputItem):
            turns.output_item(event.response_id, event.item_id)
        elif isinstance(event, ItemTruncated):
            self.counts["items_truncated"] += 1
            self.log.debug(
                "realtime.item_truncated", item=event.item_id, audio_end_ms=event.audio_end_ms
            )
        elif isinstance(event, AudioDelta):
            turns.audio(event.response_id, len(event.pcm))
            await self.listener.audio(event.response_id, event.pcm)
        elif isinstance(event, TranscriptDelta):
            turns.delta(event.response_id, event.text)
            await self.listener.text(event.response_id, event.text)
        elif isinstance(event, ResponseDone):
            await self._response_done(event)
        elif isinstance(event, ProviderError):
            self.counts["provider_errors"] += 1
            self.log.warning(
                "realtime.provider_error", epoch=epoch, code=event.code, message=event.message
            )
        elif isinstance(event, Disconnected):
            self._connections.pop(epoch, None)
            self.history.closing()
            self.log.warning("realtime.disconnected", epoch=epoch, reason=event.reason)
            await self._perform(machine.disconnected(epoch))

    async def _response_done(self, event: ResponseDone) -> None:
        user_text = self.turns.response_done(event, self.epoch)
        if user_text is None:
            self.counts["duplicate_terminal_events"] += 1
            return
        self.tracker.add_transcript(event.text)
        self.tracker.response_done(event.usage)
        await self._perform(self.machine.response(False))
        await self.listener.response_done(user_text, event)
        pressure = self.tracker.pressure()
        self.log.debug(
            "realtime.pressure",
            pressure=round(pressure.value, 3),
            dimension=pressure.dimension,
            tokens=pressure.used_tokens,
            estimated=pressure.tokens_estimated,
            turns=pressure.used_turns,
        )
        if self.tracker.should_rollover():
            self.work.want(partial(self._want_rollover, "pressure"))
        elif self.tracker.session_expiring(self._clock()):
            self.work.want(partial(self._want_rollover, LIFETIME))
        elif self.tracker.should_compress():
            self.work.checkpoint(self.checkpointer)
        if self.tracker.should_prepare():
            self.standby.prepare()

    # -- rollover ----------------------------------------------------------------------------

    async def _want_rollover(self, reason: str) -> None:
        """Schedule the rollover now; its connect waits for the checkpoint in progress.

        Scheduling at once (not after the summary) means the boundary is taken as soon as
        it is safe and input is buffered from then, so the old session never receives
        more than it held when the pressure crossed ``rollover_at``. A reconnect for the
        session's lifetime alone, below ``compress_at``, summarizes nothing: the new
        session is seeded with the dialogue verbatim (``PressureTracker.needs_summary``).
        """
        self.history.requested()
        if self.tracker.needs_summary(reason):
            self.work.checkpoint(self.checkpointer)
        async with self._lock:
            await self._perform(self.machine.request_rollover(reason))
            if self.machine.scheduled is not None:
                self._watch += 1
                self.work.spawn(self._watch_boundary(self._watch))

    async def _watch_boundary(self, generation: int) -> None:
        """Bound the wait for a safe boundary: after ``boundary_wait_s`` the rollover is
        given up (counted, logged) and the session kept until its natural end; a later
        completed response over ``rollover_at`` schedules it again."""
        await asyncio.sleep(self.settings.boundary_wait_s)
        async with self._lock:
            machine = self.machine
            if generation != self._watch or machine.scheduled is None:
                return
            blockers = machine.boundary.blockers()
            await self._perform(machine.abandon_rollover())
            self.history.abandoned()
            self.log.warning(
                "realtime.boundary_timeout",
                waited_s=self.settings.boundary_wait_s,
                blockers=list(blockers),
                boundary_timeouts=self.counts["boundary_timeouts"],
            )
        await self.work.notify()
