"""VoiceRenderer: the actor that plays ``ResponseOutput`` through a sink.

A thin shell around :class:`~xrmq.actors.voice.ordering.VoiceOrdering`: handlers feed
messages in and return at once (an actor's handlers must not block its mailbox); one
player task per participant plays what the ordering hands out, and a timer task closes
idle streams. The renderer owns those tasks: they start in ``on_start`` and are
cancelled in ``on_stop``. Nothing a producer sends can crash it: bad, late and
duplicate frames are dropped, counted (``ordering.counts``) and logged; a failing sink
is logged (``sink_failures``) and playback goes on.

Its topics are constructor arguments, so it tells the runtime its subscriptions
through ``handlers()``.

With ``stages_topic`` it reports, once each reply it played ended (played out, cut or
dropped), a ``PlaybackStages`` for the reply's request (the turn's id): when its first
segment went to the sink and, for a sink with ``take_frames(participant)`` (the audio
sink), when its first and last audio frame went out; the router adds them to the turn's
record. With them, the parts of the wait for the first frame that are not the renderer's:
when the chunk that completed the first piece was published (its envelope time) and, for a
sink with ``take_synthesis(participant)``, when the first piece's synthesis began and
returned. One small message per reply, nothing per frame.

A sink with ``prepare(segment)`` and ``discard(participant)`` (the audio sink) gets the
next piece of the playing response as soon as the ordering has it (``take_ahead``: one
ahead), to synthesize while the playing one is heard; a cut discards it.
"""

from __future__ import annotations

import asyncio
import time
from collections import OrderedDict
from collections.abc import Callable
from typing import Any

from xrmq.actors.clock import now_us
from xrmq.actors.runtime import Agent, Handler, Handlers, RuntimeContext, get_logger
from xrmq.schemas import Interrupted, PlaybackStages, ResponseOutput, UserQuery
from xrmq.topics import VOICE_OUTPUT_TOPIC, Topic, check_topic

from .ordering import (
    Cut,
    Dropped,
    Effect,
    Forgotten,
    ResponseEnded,
    Segment,
    StreamClosed,
    VoiceOrdering,
    Wake,
)
from .sinks import Sink, Sleep


class VoiceRenderer(Agent):
    """Plays a ``ResponseOutput`` topic for every participant (or the one it is registered for).

    ``output_topic`` carries the replies and updates; with ``query_topic`` (``UserQuery``)
    a new query supersedes the participant's earlier requests, whose replies are then
    dropped (the query's envelope ``message_id`` stays current, for producers that use
    it as the request id); with ``interrupted_topic`` (``Interrupted``) a barge-in cuts
    the participant's output (every participant's, for a global message).

    ``clock`` (monotonic seconds) and ``sleep`` drive the idle-stream timer; tests pass
    their own. The ordering settings are those of ``VoiceOrdering`` (``sentences``: a sink
    that synthesizes speech gets whole sentences of a streaming reply); ``max_participants``
    also bounds the player tasks (one per participant the ordering remembers).

    A gap the bus reports in a producer's messages for a participant marks that
    participant's streams from the producer: they end ``incomplete`` (``on_gap``).

    ``stages_topic`` (carrying ``PlaybackStages``) receives each played reply's playback
    stages (see the module docstring).
    """

    def __init__(
        self,
        sink: Sink,
        *,
        output_topic: Topic[ResponseOutput] = VOICE_OUTPUT_TOPIC,
        query_topic: Topic[UserQuery] | None = None,
        interrupted_topic: Topic[Interrupted] | None = None,
        idle_timeout_s: float = 10.0,
        queue_capacity: int = 32,
        max_participants: int = 1024,
        combine_updates: bool = True,
        sentences: bool = False,
        clock: Callable[[], float] = time.monotonic,
        sleep: Sleep = asyncio.sleep,
        stages_topic: Topic[PlaybackStages] | None = None,
    ) -> None:
        if not (callable(getattr(sink, "play", None)) and callable(getattr(sink, "end", None))):
            raise ValueError(
                "VoiceRenderer.sink: must have async play(segment) and end(ended) methods"
            )
        check_topic(output_topic, ResponseOutput, "VoiceRenderer.output_topic")
        check_topic(query_topic, UserQuery, "VoiceRenderer.query_topic")
        check_topic(interrupted_topic, Interrupted, "VoiceRenderer.interrupted_topic")
        check_topic(stages_topic, PlaybackStages, "VoiceRenderer.stages_topic")
        self.sink = sink
        self.output_topic = output_topic
        self.query_topic = query_topic
        self.interrupted_topic = interrupted_topic
        self.stages_topic = stages_topic
        self._stages: OrderedDict[int, list[Any]] = OrderedDict()
        """Per reply playing (its response number): request id, first played, first frame,
        last frame, first text, synthesis start and end (bounded by ``max_participants``: a
        participant plays one at a time)."""
        self._texts: OrderedDict[str, int] = OrderedDict()
        """Per request, the envelope time of its latest reply chunk (bounded as ``_stages``)."""
        self._ahead: dict[str, Segment] = {}
        """Per participant, the segment prepared to play next."""
        self.ordering = VoiceOrdering(
            idle_timeout_s=idle_timeout_s,
            queue_capacity=queue_capacity,
            max_participants=max_participants,
            combine_updates=combine_updates,
            sentences=sentences,
        )
        self.sink_failures = 0
        self._clock = clock
        self._sleep = sleep
        self._log = get_logger(actor="voice_renderer")
        self._players: dict[str, asyncio.Task[None]] = {}
        self._wakes: dict[str, asyncio.Event] = {}
        self._playing: dict[str, asyncio.Task[None]] = {}
        self._timer: asyncio.Task[None] | None = None
        self._streams_opened = asyncio.Event()

    # -- lifecycle --------------------------------------------------------------------

    async def on_start(self) -> None:
        self._log = get_logger(actor=self.name or "voice_renderer")
        self._timer = asyncio.create_task(
            self._expire_idle_streams(), name=f"{self.name}-idle-timer"
        )

    async def on_stop(self) -> None:
        for participant_id in list(self._ahead):
            self._discard_ahead(participant_id)
        tasks = [*self._players.values(), *([self._timer] if self._timer else [])]
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        self._players.clear()
        self._timer = None

    # -- handlers ---------------------------------------------------------------------

    def handlers(self) -> Handlers:
        """The output topic, and the query and interrupted topics when given."""
        chosen: dict[Topic | None, Handler] = {
            self.output_topic: self.handle_output,
            self.query_topic: self.handle_query,
            self.interrupted_topic: self.handle_interrupted,
        }
        return {topic: handler for topic, handler in chosen.items() if topic is not None}

    async def handle_output(self, message: ResponseOutput, ctx: RuntimeContext) -> None:
        metadata = ctx.metadata
        if self.stages_topic is not None and message.request_id is not None:
            self._texts[message.request_id] = metadata.timestamp_us
            self._texts.move_to_end(message.request_id)
            while len(self._texts) > self.ordering.max_participants:
                self._texts.popitem(last=False)
        self._apply(
            self.ordering.output(
                ctx.participant_id, metadata.source, message, self._clock(), metadata.sender
            )
        )

    async def on_gap(self, gap: Any, ctx: RuntimeContext) -> None:
        if gap.participant_id is not None and gap.topic == self.output_topic.name:
            self._apply(self.ordering.gap(gap.participant_id, gap.sender))

    def gauges(self) -> dict[str, float]:
        counts = self.ordering.counts
        return {
            "voice.participants": len(self.ordering),
            "voice.incomplete": counts["incomplete"],
            "voice.participants_evicted": counts["participants_evicted"],
        }

    async def handle_query(self, message: UserQuery, ctx: RuntimeContext) -> None:
        if ctx.participant_id is None:
            self._log.warning("voice.query_without_participant", sender=ctx.metadata.sender)
            return
        self._apply(self.ordering.query(ctx.participant_id, ctx.metadata.message_id))

    async def handle_interrupted(self, message: Interrupted, ctx: RuntimeContext) -> None:
        self._apply(self.ordering.interrupted(ctx.participant_id))

    # -- effects, players, timer ---------------------------------------------------------

    def _apply(self, effects: list[Effect]) -> None:
        for effect in effects:
            if isinstance(effect, Wake):
                self._wake(effect.participant_id)
            elif isinstance(effect, Cut):
                playing = self._playing.get(effect.participant_id)
                if playing is not None:
                    playing.cancel()
                self._discard_ahead(effect.participant_id)
            elif isinstance(effect, Dropped):
                self._log.info(
                    "voice.dropped",
                    participant=effect.participant_id,
                    source=effect.source,
                    reason=effect.reason,
                    detail=effect.detail,
                )
            elif isinstance(effect, Forgotten):
                self._forget(effect.participant_id)
            elif isinstance(effect, StreamClosed):
                self._log.warning(
                    "voice.stream_closed",
                    participant=effect.participant_id,
                    source=effect.source,
                    response_id=effect.response_id,
                    reason=effect.reason,
                )
        if self.ordering.next_deadline() is not None:
            self._streams_opened.set()

    def _forget(self, participant_id: str) -> None:
        """Stop the player of a participant the ordering forgot."""
        self._wakes.pop(participant_id, None)
        self._discard_ahead(participant_id)
        player = self._players.pop(participant_id, None)
        if player is not None:
            player.cancel()

    def _discard_ahead(self, participant_id: str) -> None:
        if self._ahead.pop(participant_id, None) is not None:
            self.sink.discard(participant_id)  # type: ignore[attr-defined]

    def _wake(self, participant_id: str) -> None:
        wake = self._wakes.get(participant_id)
        if wake is None:
            wake = self._wakes[participant_id] = asyncio.Event()
            self._players[participant_id] = asyncio.create_task(
                self._play(participant_id, wake), name=f"{self.name}-player-{participant_id}"
            )
        wake.set()

    async def _play(self, participant_id: str, wake: asyncio.Event) -> None:
        """Play one participant's steps in order, one segment at a time."""
        while True:
            wake.clear()
            step = self._ahead.pop(participant_id, None) or self.ordering.take(participant_id)
            if step is None:
                await wake.wait()
            elif isinstance(step, ResponseEnded):
                await self._guard(self.sink.end(step), step.participant_id, "end")
                self._report_stages(step)
            else:
                self._note_played(step)
                playing = asyncio.create_task(
                    self._guard(self.sink.play(step), participant_id, "play")
                )
                self._playing[participant_id] = playing
                try:
                    await self._while_playing(participant_id, playing, wake)
                finally:
                    del self._playing[participant_id]
                    if not playing.done():  # this player is being cancelled (on_stop)
                        playing.cancel()
                        await asyncio.gather(playing, return_exceptions=True)
                self._note_frames(step)
                self._apply(self.ordering.finished(step))

    async def _while_playing(
        self, participant_id: str, playing: asyncio.Task[None], wake: asyncio.Event
    ) -> None:
        """Wait for ``playing``; meanwhile hand a sink that prepares the next piece as soon
        as the ordering has one (each wake may bring its text)."""
        if not callable(getattr(self.sink, "prepare", None)):
            await asyncio.wait({playing})
            return
        while not playing.done():
            if participant_id not in self._ahead:
                ahead = self.ordering.take_ahead(participant_id)
                if ahead is not None:
                    self._ahead[participant_id] = ahead
                    self.sink.prepare(ahead)  # type: ignore[attr-defined]
            wake.clear()
            woken = asyncio.ensure_future(wake.wait())
            try:
                await asyncio.wait({playing, woken}, return_when=asyncio.FIRST_COMPLETED)
            finally:
                woken.cancel()

    # -- playback stages ------------------------------------------------------------------

    def _note_played(self, segment: Segment) -> None:
        if self.stages_topic is None or segment.kind != "reply" or segment.request_id is None:
            return
        if segment.response not in self._stages:
            text_us = self._texts.get(segment.request_id)
            self._stages[segment.response] = [
                segment.request_id,
                now_us(),
                None,
                None,
                text_us,
                None,
                None,
            ]
            while len(self._stages) > self.ordering.max_participants:
                self._stages.popitem(last=False)

    def _note_frames(self, segment: Segment) -> None:
        stages = self._stages.get(segment.response)
        take = getattr(self.sink, "take_frames", None)
        frames = take(segment.participant_id) if callable(take) else None
        take = getattr(self.sink, "take_synthesis", None)
        synthesis = take(segment.participant_id) if callable(take) else None
        if stages is None or frames is None:
            return
        first_us, last_us = frames
        if stages[2] is None:
            stages[2] = first_us
            if synthesis is not None:
                stages[5], stages[6] = synthesis
        stages[3] = last_us

    def _report_stages(self, ended: ResponseEnded) -> None:
        stages = self._stages.pop(ended.response, None)
        runtime = self.runtime
        if stages is None or self.stages_topic is None or runtime is None or not runtime.running:
            return
        request_id, first_played_us, first_frame_us, last_frame_us, *parts = stages
        runtime.send(
            self.stages_topic,
            PlaybackStages(request_id, first_played_us, first_frame_us, last_frame_us, *parts),
            participant_id=ended.participant_id,
            source="voice_renderer",
        )

    async def _guard(self, call: Any, participant_id: str, what: str) -> None:
        try:
            await call
        except Exception as error:
            self.sink_failures += 1
            self._log.error(
                "voice.sink_failed", participant=participant_id, call=what, error=repr(error)
            )

    async def _expire_idle_streams(self) -> None:
        """Close streams idle for ``idle_timeout_s``, sleeping until the earliest deadline.

        Deadlines only move later (a fragment pushes its stream's deadline back, a new
        stream's deadline is the latest), so sleeping to the current earliest one and
        re-checking never misses a timeout.
        """
        while True:
            deadline = self.ordering.next_deadline()
            if deadline is None:
                self._streams_opened.clear()
                await self._streams_opened.wait()
                continue
            delay = deadline - self._clock()
            if delay > 0:
                await self._sleep(delay)
            self._apply(self.ordering.expire(self._clock()))
