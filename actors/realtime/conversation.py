"""RealtimeConversation: a routed destination that answers speech with speech, per participant.

One provider realtime session (``RealtimeSession``) per participant, opened on the
participant's first ``audio.in`` frame (or routed text turn) and fed every frame from
then on (resampled to the provider's rate). The provider's answer is spoken onto
``audio.out`` (20 ms PCM16 frames, paced in real time, ``audio.playback`` started/done
around it) and its transcript published as a reply on ``output_topic`` with docs/context.md's
framing (``ResponseOutputs``: one stream per response, an empty final frame), so the
voice renderer's text clients see it. A routed text turn (``answer``) is sent into the
same session as a text item and its reply streamed the same way.

Shared memory: at every (re)connect the session's instructions are the system prompt,
the application instructions and the participant's ``ContextManager`` blocks (notes,
scene, earlier dialogue of text destinations) as they are then; every completed
exchange is recorded into the shared dialogue (``record_exchange``), so text and
realtime destinations share one memory.

The boundary: ``audio.playback`` ``done`` on the bus (from whichever speaker side plays
the audio; this destination's own paced output publishes it too) tells the session that
no assistant audio is playing any more. Gauges per participant (``xrmq top`` shows
them as one realtime line): ``realtime.<participant>.pressure``, ``.epoch``, ``.backlog``,
the counters of ``GAUGE_COUNTS`` (rollovers, replayed input, overflow, stale-epoch drops,
standby switches and fallbacks...), the standby's state (``.standby_state``, an index of
``standby.STATES``) and the last switch's duration (``.standby_switch_ms``), and the
last rollover's phases with their median (``.rollover_<phase>_ms``,
``.rollover_<phase>_p50_ms``: boundary_wait, checkpoint, handshake, connect, replay).
``participant.left`` (and the router's ``participant_left``) forgets the participant: the
session is closed, its checkpoint in progress cancelled, its checkpoints dropped.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
import uuid
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from xrmq.actors.conversation import ParticipantContext, context_message, system_message
from xrmq.actors.interaction import Reply, ResponseOutputs
from xrmq.actors.prompts import load_prompt
from xrmq.actors.routing.destination import (
    ClosingDestination,
    Started,
    answer_prologue,
    ensure_context,
)
from xrmq.actors.runtime import Agent, RuntimeContext, get_logger, subscribe
from xrmq.schemas import (
    AgentTurn,
    AudioFrame,
    AudioPlayback,
    DestinationResult,
    ParticipantLeft,
    ResponseOutput,
    RoutingAid,
)
from xrmq.topics import (
    AUDIO_IN_TOPIC,
    AUDIO_OUT_TOPIC,
    AUDIO_PLAYBACK_TOPIC,
    PARTICIPANT_LEFT_TOPIC,
    Topic,
)

from .provider import RealtimeProvider, ResponseDone
from .session import RealtimeSession, SessionListener, SessionSettings, Summarize
from .standby import STATES

DEFAULT_ROUTE = "realtime"
GAUGE_COUNTS = (
    "rollovers",
    "reconnects",
    "replayed",
    "overflow",
    "stale_events",
    "fallbacks",
    "boundary_timeouts",
    "ineffective_rollovers",
    "standby_switches",
    "standby_fallbacks",
)
"""The session counters published as gauges (``xrmq top``'s realtime line)."""
MAX_RECORDED = 1024
"""Own exchanges remembered per participant to keep them out of the instructions."""
OUT_RATE = 16_000
FRAME_MS = 20
DEFAULT_ROUTING = RoutingAid(
    "Realtime voice conversation: answers the participant's speech with speech, from the "
    "participant's shared context and the whole realtime dialogue."
)


def _now_us() -> int:
    return time.time_ns() // 1000


def _resample_pcm(pcm: bytes, rate: int, target: int) -> bytes:
    if rate == target or not pcm:
        return pcm
    from xrmq.actors.voice.pcm import float_to_pcm16, pcm16_to_float, resample

    return float_to_pcm16(resample(pcm16_to_float(pcm), rate, target))


@dataclass
class _Turn:
    request_id: str
    timestamp_us: int
    reply: Reply | None = None
    text_future: asyncio.Future[DestinationResult] | None = None
    started: Started | None = None


class _Participant(SessionListener):
    """One participant's session, speaker and reply streams."""

    def __init__(self, owner: RealtimeConversation, participant_id: str) -> None:
        self.owner = owner
        self.participant_id = participant_id
        self.session = RealtimeSession(
            owner.provider,
            instructions=lambda: owner.instructions_for(participant_id),
            summarize=owner.summarize,
            settings=owner.settings,
            listener=self,
            participant_id=participant_id,
        )
        self.turn: _Turn | None = None
        self.pending_text: _Turn | None = None
        self.frames_out = 0
        self.seq = 0
        self.starting: asyncio.Future[None] | None = None
        self.recorded: set[str] = set()
        """Exchanges this session recorded into the shared dialogue, as blocks render them."""
        self._recorded_order: deque[str] = deque()
        self._audio: asyncio.Queue[tuple[str, bytes] | None] = asyncio.Queue()
        self._playing: str | None = None
        """The response whose audio is playing (``_sent`` of its frames played)."""
        self._player = asyncio.ensure_future(self._play())
        self._speaking = False
        self._cut_at = False
        self._cancelling: asyncio.Future[None] | None = None
        self._current_response: str | None = None
        self._by_response: dict[str, _Turn] = {}
        self._cut_responses: deque[str] = deque(maxlen=8)
        self._started = 0.0
        self._sent = 0
        self.log = get_logger(actor=owner.route, participant=participant_id)

    # -- session events --------------------------------------------------------------

    async def speech_started(self) -> None:
        """The participant speaks: a new turn; over the assistant's audio, a barge-in."""
        if self._speaking or self.session.machine.boundary.response_active:
            playing, heard_ms = self._playing, self._sent * FRAME_MS
            await self._cut()
            # Called from the session's event handling, which holds its lock: cancel and
            # truncate the answer at what was heard after it.
            self._cancelling = asyncio.ensure_future(self._interrupt(playing, heard_ms))
        self.turn = _Turn(uuid.uuid4().hex, _now_us())

    async def _interrupt(self, playing: str | None, heard_ms: int) -> None:
        await self.session.cancel_response()
        if playing is not None:
            await self.session.truncate(playing, heard_ms)

    async def _cut(self) -> None:
        """Stop the assistant's audio now: queued audio dropped, playback done."""
        while not self._audio.empty():
            self._audio.get_nowait()
        self._cut_at = True
        if self._current_response is not None:
            self._cut_responses.append(self._current_response)
        self._audio.put_nowait(None)

    async def audio(self, response_id: str, pcm: bytes) -> None:
        if response_id in self._cut_responses:
            return  # the rest of a response the participant talked over
        self._current_response = response_id
        pcm = _resample_pcm(pcm, self.owner.provider.sample_rate, OUT_RATE)
        self._audio.put_nowait((response_id, pcm))

    async def text(self, response_id: str, delta: str) -> None:
        turn = self._by_response.get(response_id) or self._current()
        self._by_response[response_id] = turn
        if turn.reply is None:
            outputs = self.owner.outputs
            turn.reply = outputs.reply(
                self.participant_id,
                request_id=turn.request_id,
                timestamp_us=turn.timestamp_us,
                started=turn.started,
            )
            await turn.reply.__aenter__()
        await turn.reply.send(delta)

    async def response_done(self, user_text: str, done: ResponseDone) -> None:
        turn = self._by_response.pop(done.response_id, None) or self._current()
        if turn is self.turn:
            self.turn = None
        if turn is self.pending_text:
            self.pending_text = None
        self._current_response = None
        self._audio.put_nowait(None)  # the end of this response's audio
        if turn.reply is not None:
            await turn.reply.__aexit__(None, None, None)
        answer = done.text.strip()
        if done.status == "completed" and answer and user_text.strip():
            self.owner.context.record_exchange(
                self.participant_id,
                user_text.strip(),
                answer,
                timestamp_us=turn.timestamp_us,
                exchange_id=turn.request_id,
            )
            pair = f"User: {user_text.strip()}\nAssistant: {answer}"
            self.recorded.add(pair)
            self._recorded_order.append(pair)
            if len(self._recorded_order) > MAX_RECORDED:
                self.recorded.discard(self._recorded_order.popleft())
        if turn.text_future is not None and not turn.text_future.done():
            turn.text_future.set_result(DestinationResult(response=answer))

    async def failed(self, reason: str) -> None:
        self.log.error("realtime.session_failed", reason=reason)
        for turn in (self.turn, self.pending_text):
            if turn is not None and turn.text_future is not None and not turn.text_future.done():
                turn.text_future.set_exception(RuntimeError(f"realtime session failed: {reason}"))

    def _current(self) -> _Turn:
        if self.pending_text is not None:
            return self.pending_text
        if self.turn is None:
            self.turn = _Turn(uuid.uuid4().hex, _now_us())
        return self.turn

    # -- the speaker -----------------------------------------------------------------------

    async def _play(self) -> None:
        """Publish response audio as paced 20 ms frames; playback started/done around it."""
        owner, period = self.owner, FRAME_MS / 1000
        size = OUT_RATE * FRAME_MS // 1000 * 2
        held = b""
        while True:
            queued = await self._audio.get()
            if queued is None:
                if held and not self._cut_at:
                    await self._frame(held.ljust(size, b"\0"))
                held, self._cut_at = b"", False
                self._playing = None
                if self._speaking:
                    self._speaking = False
                    await owner.publish(
                        AUDIO_PLAYBACK_TOPIC, AudioPlayback("done", _now_us()), self.participant_id
                    )
                continue
            if self._cut_at:
                continue  # audio queued before the cut's end marker: dropped
            self._playing, chunk = queued
            if not self._speaking:
                self._speaking = True
                self._started = time.monotonic()
                self._sent = 0
                await owner.publish(
                    AUDIO_PLAYBACK_TOPIC, AudioPlayback("started", _now_us()), self.participant_id
                )
            held += chunk
            while len(held) >= size and not self._cut_at:
                frame, held = held[:size], held[size:]
                due = self._started + self._sent * period
                await asyncio.sleep(max(0.0, due - time.monotonic()))
                if not self._cut_at:
                    await self._frame(frame)
                    self._sent += 1

    async def _frame(self, pcm: bytes) -> None:
        frame = AudioFrame(pcm, OUT_RATE, 1, self.frames_out, _now_us())
        self.frames_out += 1
        await self.owner.publish(self.owner.audio_out, frame, self.participant_id)

    async def close(self, *, forget: bool = False) -> None:
        """Stop the speaker and close the session; ``forget`` also drops what the session
        holds of the participant (``RealtimeSession.forget``) and what this side recorded."""
        self._player.cancel()
        with contextlib.suppress(BaseException):
            await self._player
        if forget:
            starting = self.starting
            if starting is not None and not starting.done():  # no connect after the forget
                starting.cancel()
                await asyncio.gather(starting, return_exceptions=True)
            await self.session.forget()
            self.recorded.clear()
            self._recorded_order.clear()
            self._by_response.clear()
        else:
            await self.session.close()


class RealtimeConversation(ClosingDestination, Agent):
    """See the module docstring. Register it on a runtime (``runtime.register(name, rt)``);
    it is also a ``RoutableAgent`` for text turns routed to it."""

    def __init__(
        self,
        provider: RealtimeProvider,
        *,
        context: ParticipantContext,
        runtime: Any,
        output_topic: Topic[ResponseOutput],
        instructions: str = "",
        system_prompt: str | None = None,
        summarize: Summarize | None = None,
        settings: SessionSettings | None = None,
        audio_out: Topic[AudioFrame] = AUDIO_OUT_TOPIC,
        routing: RoutingAid | None = None,
        route: str = DEFAULT_ROUTE,
        clock: Callable[[], int] = _now_us,
    ) -> None:
        for method in ("blocks", "record_exchange"):
            if not callable(getattr(context, method, None)):
                raise ValueError(
                    f"RealtimeConversation.context: must be a ContextManager (it lacks {method})"
                )
        if not callable(getattr(runtime, "publish", None)):
            raise ValueError("RealtimeConversation.runtime: must be an AgentRuntime")
        if not (isinstance(output_topic, Topic) and output_topic.message_type is ResponseOutput):
            raise ValueError(
                "RealtimeConversation.output_topic: must be a Topic carrying ResponseOutput"
            )
        self.provider = provider
        self.context = context
        self.runtime_ = runtime
        self.output_topic = output_topic
        self.audio_out = audio_out
        self.summarize = summarize
        self.settings = SessionSettings() if settings is None else settings
        self.routing = DEFAULT_ROUTING if routing is None else routing
        self.route = route
        prompt = load_prompt("core") if system_prompt is None else system_prompt
        self._system = system_message(prompt, instructions)
        self._clock = clock
        self.outputs = ResponseOutputs(runtime, output_topic, source=route)
        self.participants: dict[str, _Participant] = {}
        self._forgetting: dict[str, asyncio.Future[None]] = {}
        """Participants being forgotten: every caller of ``participant_left`` awaits it."""
        self._closed = False

    def instructions_for(self, participant_id: str) -> str:
        """The session instructions now: system prompt, instructions, shared context.

        Dialogue blocks of exchanges this destination recorded itself are left out: the
        session's checkpoint (summary, tail, later messages) carries them already, and
        seeding both would fill the new session with the same dialogue twice.
        """
        participant = self.participants.get(participant_id)
        own = participant.recorded if participant is not None else set()
        blocks = [
            block
            for block in self.context.blocks(participant_id)
            if not any(block.text.endswith(pair) for pair in own)
        ]
        return f"{self._system}\n\n{context_message(blocks, self._clock())}"

    async def publish(self, topic: Topic[Any], message: Any, participant_id: str) -> None:
        await self.runtime_.publish(
            topic, message, participant_id=participant_id, source=self.route
        )

    def participant(self, participant_id: str) -> _Participant:
        found = self.participants.get(participant_id)
        if found is None:
            found = _Participant(self, participant_id)
            self.participants[participant_id] = found
            found.starting = asyncio.ensure_future(self._start(found))
        return found

    async def _start(self, participant: _Participant) -> None:
        try:
            # the session's instructions render the context: a participant the context's
            # replica evicted is fetched first
            await ensure_context(self.context, participant.participant_id)
            await participant.session.start()
        except Exception as error:
            participant.log.error("realtime.start_failed", error=str(error))

    def gauges(self) -> dict[str, float]:
        """Per participant: ``realtime.<pid>.<name>`` for the session's state and counters
        (``GAUGE_COUNTS``), and each phase of the last rollover and its median over the
        last ``MAX_RECORDS`` (``rollover_<phase>_ms``, ``rollover_<phase>_p50_ms``)."""
        gauges: dict[str, float] = {}
        for pid, participant in self.participants.items():
            session = participant.session
            prefix = f"realtime.{pid}."
            gauges[prefix + "pressure"] = round(session.pressure(), 3)
            gauges[prefix + "epoch"] = float(session.epoch)
            gauges[prefix + "backlog"] = float(len(session.machine.backlog))
            for name in GAUGE_COUNTS:
                gauges[prefix + name] = float(session.counts[name])
            standby = session.standby
            gauges[prefix + "standby_state"] = float(STATES.index(standby.state))
            if standby.last_switch_s is not None:
                gauges[prefix + "standby_switch_ms"] = round(standby.last_switch_s * 1000, 2)
            records = list(session.rollovers)
            if records:
                for phase, seconds in records[-1].phases().items():
                    values = sorted(record.phases()[phase] for record in records)
                    gauges[f"{prefix}rollover_{phase}_ms"] = round(seconds * 1000, 1)
                    gauges[f"{prefix}rollover_{phase}_p50_ms"] = round(
                        values[len(values) // 2] * 1000, 1
                    )
                gauges[prefix + "rollover_backlog"] = float(records[-1].backlog)
        return gauges

    # -- the bus ------------------------------------------------------------------------------

    @subscribe(AUDIO_IN_TOPIC)
    async def on_audio(self, frame: AudioFrame, ctx: RuntimeContext) -> None:
        pid = ctx.participant_id
        if pid is None or self._closed:
            return
        participant = self.participant(pid)
        pcm = frame.pcm
        if frame.channels == 2:
            pcm = _downmix(pcm)
        pcm = _resample_pcm(pcm, frame.sample_rate, self.provider.sample_rate)
        await participant.session.send_audio(pcm, frame.frame)

    @subscribe(AUDIO_PLAYBACK_TOPIC)
    async def on_playback(self, message: AudioPlayback, ctx: RuntimeContext) -> None:
        participant = self.participants.get(ctx.participant_id or "")
        if participant is not None:
            await participant.session.playback(message.state == "started")

    @subscribe(PARTICIPANT_LEFT_TOPIC)
    async def on_left(self, message: ParticipantLeft, ctx: RuntimeContext) -> None:
        await self.participant_left(ctx.participant_id or "")

    # -- RoutableAgent ----------------------------------------------------------------------

    async def answer(self, turn: AgentTurn, *, started: Started) -> DestinationResult:
        """Send the routed text turn into the participant's realtime session; the reply
        (transcript on ``output_topic``, speech on ``audio.out``) comes from the session."""
        if self._closed:
            raise RuntimeError("RealtimeConversation.answer: closed")
        route = await answer_prologue(turn, self.route)
        participant = self.participant(turn.participant_id)
        future: asyncio.Future[DestinationResult] = asyncio.get_running_loop().create_future()
        participant.pending_text = _Turn(
            turn.turn_id, turn.timestamp_us or _now_us(), text_future=future, started=started
        )
        participant.log.debug("realtime.text_turn", route=route)
        participant.seq += 1
        await participant.session.send_text(turn.text, participant.seq)
        return await future

    async def settled(self, participant_id: str) -> None:
        """Return once the participant's session has no background work left: no
        checkpoint summarizing, no rollover requested or under way
        (``RealtimeSession.settled``); at once when it has no session."""
        participant = self.participants.get(participant_id)
        if participant is not None:
            await participant.session.settled()

    async def release(self, participant_id: str) -> None:
        """The session stays: it is the participant's realtime conversation."""

    async def participant_left(self, participant_id: str) -> None:
        """Forget the participant: their session is closed, its checkpoint in progress
        cancelled, and its checkpoints and transcript dropped (a later frame or turn of
        theirs starts a fresh session, seeded from the shared context only)."""
        forgetting = self._forgetting.get(participant_id)
        if forgetting is None:  # else: heard twice (participant.left, the router): one forget
            participant = self.participants.pop(participant_id, None)
            if participant is None:
                return
            forgetting = asyncio.ensure_future(participant.close(forget=True))
            self._forgetting[participant_id] = forgetting

            def forgotten(done: asyncio.Future[None]) -> None:
                if self._forgetting.get(participant_id) is done:
                    del self._forgetting[participant_id]

            forgetting.add_done_callback(forgotten)
        await asyncio.shield(forgetting)

    async def on_stop(self) -> None:
        await self.close()

    async def close(self) -> None:
        self._closed = True
        participants, self.participants = list(self.participants.values()), {}
        for participant in participants:
            await participant.close()
        aclose = getattr(self.provider, "aclose", None)
        if aclose is not None:  # a provider that owns a server (OfflineRealtimeProvider)
            await aclose()


def _downmix(pcm: bytes) -> bytes:
    import numpy as np

    samples = np.frombuffer(pcm, dtype="<i2").reshape(-1, 2).astype(np.int32)
    return samples.mean(axis=1).astype("<i2").tobytes()
