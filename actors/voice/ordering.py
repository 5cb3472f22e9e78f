"""The voice renderer's ordering rules, as a pure state machine.

Why a separate class: the rules (who speaks next, what a new query or an urgent update
does to the output being played, when an abandoned stream is closed) are the subtle
part of the renderer, and they are testable without a bus, a sink or a clock. The
``VoiceRenderer`` actor only feeds messages in, plays what :meth:`VoiceOrdering.take`
hands out and applies the returned effects. Each participant's queues, and which
response plays next from them, are a ``ParticipantQueues`` (``queues``); this module
keeps the rules across participants and streams.

Contract:

* Inputs are method calls; every time-dependent call takes ``now`` (monotonic seconds,
  chosen by the caller). Nothing here sleeps, logs or performs I/O.
* Every input returns a list of effects: :class:`Cut` (stop the participant's playing
  segment now), :class:`Wake` (the participant may have something to play) and
  :class:`Dropped` / :class:`StreamClosed` notices for the shell to log. Drops are also
  counted in :attr:`VoiceOrdering.counts`.
* Per participant, the player calls :meth:`take` for the next step (a :class:`Segment`
  to play or a :class:`ResponseEnded` notice) and :meth:`finished` once a segment has
  played. One segment per participant plays at a time; while it plays, a sink that
  synthesizes speech may prepare the next piece of the same response
  (:meth:`take_ahead`: at most one ahead, in order), which plays next, so there is no gap
  between sentences. A cut stops both.

Rules (upstream xr_ai_voice / xr_ai_interaction, docs/interaction.md):

* Streamed replies are keyed by (participant, source, response_id), so two producers
  never merge or interleave inside one response.
* Replies play in arrival order per participant (FIFO). A reply whose request was
  superseded by a newer query, or interrupted, is dropped: the playing one is cut,
  queued ones removed, fragments still arriving dropped.
* A streamed reply is handed out as it arrives, in complete words; with ``sentences``
  (a sink that synthesizes speech) in complete sentences (``Item.release``).
* Updates play only when the participant is not being spoken to (no reply playing,
  streaming or queued); consecutive queued updates are combined into one response.
* An urgent update cuts the current output and plays next. It never cuts another urgent
  update: it queues behind it, so no urgent information is lost.
* ``withdraw`` drops the producer's queued, not-yet-playing updates for that participant
  and nothing else.
* A stream with no fragment for ``idle_timeout_s`` is closed (what it received still
  plays); late fragments of a closed stream are dropped and counted.
* Queues, open streams, participants and the memory of closed streams and requests are
  bounded; evictions are counted. Beyond ``max_participants`` the least recently active
  idle participant is forgotten (:class:`Forgotten`; else the least recently active).
  An interruption of a participant the ordering does not know creates no state.
* A reply stream that may have lost a fragment (:meth:`VoiceOrdering.gap`: the bus
  reported a gap in its producer's messages for the participant) still plays what
  arrived, but ends ``incomplete``, never ``completed``; counted as ``incomplete``.
"""

from __future__ import annotations

from collections import Counter, OrderedDict
from dataclasses import dataclass
from typing import Literal

from xrmq.schemas import ResponseOutput
from xrmq.schemas._validation import check_positive

from .queues import EndReason, Item, ParticipantQueues, ResponseEnded, StreamKey

__all__ = [
    "Cut",
    "Dropped",
    "Effect",
    "EndReason",
    "Forgotten",
    "ResponseEnded",
    "Segment",
    "StreamClosed",
    "VoiceOrdering",
    "Wake",
]


@dataclass(frozen=True, slots=True)
class Segment:
    """A piece of one response to speak now: complete words, never half a word."""

    participant_id: str
    response: int
    """Number of the response this segment belongs to (unique per ``VoiceOrdering``)."""
    kind: Literal["reply", "update"]
    sources: tuple[str, ...]
    """Producers of the response; several for combined updates."""
    request_id: str | None
    text: str
    timestamp_us: int | None
    """Originating input time of the response, for latency reporting."""
    first: bool
    """Whether this is the first segment of its response."""
    urgent: bool
    token: int
    """Identifies this hand-out; :meth:`VoiceOrdering.finished` ignores stale tokens."""


@dataclass(frozen=True, slots=True)
class Cut:
    """Stop the segment playing for ``participant_id`` now, and the one prepared ahead."""

    participant_id: str


@dataclass(frozen=True, slots=True)
class Wake:
    """``participant_id`` may have a step ready: the player should call ``take``."""

    participant_id: str


@dataclass(frozen=True, slots=True)
class Dropped:
    """A message (or a queued response) was dropped; ``reason`` is also counted."""

    participant_id: str | None
    source: str
    reason: str
    detail: str = ""


@dataclass(frozen=True, slots=True)
class StreamClosed:
    """A stream was closed without its terminator (idle timeout or open-stream eviction)."""

    participant_id: str
    source: str
    response_id: str
    reason: Literal["idle_timeout", "evicted"]


@dataclass(frozen=True, slots=True)
class Forgotten:
    """The ordering forgot ``participant_id`` (over ``max_participants``): stop its player."""

    participant_id: str


Effect = Cut | Wake | Dropped | StreamClosed | Forgotten


class VoiceOrdering:
    """Decides what each participant hears, and when; see the module docstring."""

    def __init__(
        self,
        *,
        idle_timeout_s: float = 10.0,
        queue_capacity: int = 32,
        max_open_streams: int = 1024,
        closed_capacity: int = 1024,
        request_capacity: int = 64,
        max_participants: int = 1024,
        combine_updates: bool = True,
        sentences: bool = False,
    ) -> None:
        if not idle_timeout_s > 0:
            raise ValueError("VoiceOrdering.idle_timeout_s: must be > 0")
        for name, value in (
            ("queue_capacity", queue_capacity),
            ("max_open_streams", max_open_streams),
            ("closed_capacity", closed_capacity),
            ("request_capacity", request_capacity),
            ("max_participants", max_participants),
        ):
            check_positive(value, f"VoiceOrdering.{name}")
        self.idle_timeout_s = idle_timeout_s
        self.queue_capacity = queue_capacity
        self.max_open_streams = max_open_streams
        self.closed_capacity = closed_capacity
        self.request_capacity = request_capacity
        self.max_participants = max_participants
        self.combine_updates = combine_updates
        self.sentences = sentences
        """Hand out a streaming reply a sentence at a time (``Item.release``)."""
        self.counts: Counter[str] = Counter()
        """Dropped messages, evictions, cuts and timeouts by reason."""
        self._participants: dict[str, ParticipantQueues] = {}
        self._open: OrderedDict[StreamKey, Item] = OrderedDict()
        self._closed: OrderedDict[StreamKey, str] = OrderedDict()
        self._numbers = 0
        self._tokens = 0
        self._forgotten: list[Effect] = []

    def __len__(self) -> int:
        """Participants with state (bounded by ``max_participants``)."""
        return len(self._participants)

    # -- inputs -----------------------------------------------------------------------

    def output(
        self,
        participant_id: str | None,
        source: str,
        message: ResponseOutput,
        now: float,
        sender: str = "",
    ) -> list[Effect]:
        """Accept one ``ResponseOutput`` published by ``source`` (on bus runtime ``sender``)
        for ``participant_id``."""
        effects = self._output(participant_id, source, message, now, sender)
        if self._forgotten:
            effects, self._forgotten = self._forgotten + effects, []
        return effects

    def _output(
        self,
        participant_id: str | None,
        source: str,
        message: ResponseOutput,
        now: float,
        sender: str,
    ) -> list[Effect]:
        try:
            message.validate_boundary()
        except ValueError as error:
            return [self._drop(participant_id, source, "invalid", str(error))]
        if participant_id is None:
            return [
                self._drop(None, source, "no_participant", f"{message.kind} without a participant")
            ]
        state = self._participant(participant_id)
        if message.kind == "withdraw":
            withdrawn = state.withdraw(source)
            return [self._drop(participant_id, source, "withdrawn") for _ in range(withdrawn)]
        if message.kind == "update":
            item = self._new_item(state, "update", source, None, message)
            item.urgent = message.urgent
            return self._enqueue(state, item)
        return self._reply(state, source, message, now, sender)

    def gap(self, participant_id: str, sender: str) -> list[Effect]:
        """The bus lost messages from ``sender`` for ``participant_id``: its open streams, and
        the stream its next fragment belongs to, may miss a fragment (they end ``incomplete``)."""
        state = self._participants.get(participant_id)
        if state is None:
            return []
        for item in self._open.values():
            if item.participant_id == participant_id and item.sender == sender:
                item.gapped = True
        state.gap_from.add(sender)
        return []

    def query(self, participant_id: str, request_id: str) -> list[Effect]:
        """A new user query: every earlier request of the participant is superseded.

        ``request_id`` (the query's own id, for producers that answer with it) stays
        current; replies to requests first seen after this call play normally.
        """
        state = self._participant(participant_id)
        effects = self._supersede(state, "superseded", keep=request_id)
        state.remember_request(request_id, self.request_capacity)
        if self._forgotten:
            effects, self._forgotten = self._forgotten + effects, []
        return effects

    def interrupted(self, participant_id: str | None) -> list[Effect]:
        """Barge-in: stop what ``participant_id`` hears (everyone's when None).

        Every request seen so far is superseded (its replies dropped) and the playing
        output, reply or update, is cut; queued updates stay queued.
        """
        if participant_id is None:
            targets = list(self._participants.values())
        else:  # one the ordering does not know has nothing to stop: no state for it
            known = self._participants.get(participant_id)
            targets = [] if known is None else [known]
        effects: list[Effect] = []
        for state in targets:
            effects += self._supersede(state, "interrupted", keep=None)
            if state.active is not None:
                effects += self._end_active(state, "interrupted")
        return effects

    def expire(self, now: float) -> list[Effect]:
        """Close every stream that has had no fragment for ``idle_timeout_s``."""
        effects: list[Effect] = []
        while self._open:
            item = next(iter(self._open.values()))
            if now - item.last_fragment_at < self.idle_timeout_s:
                break
            effects += self._close_stream(item, "idle_timeout")
        return effects

    def next_deadline(self) -> float | None:
        """When :meth:`expire` next has work (None: no open stream)."""
        for item in self._open.values():
            return item.last_fragment_at + self.idle_timeout_s
        return None

    # -- the player's side ------------------------------------------------------------

    def take(self, participant_id: str) -> Segment | ResponseEnded | None:
        """The participant's next step: an end notice, a segment to play, or nothing yet."""
        state = self._participants.get(participant_id)
        if state is None:
            return None
        if state.ended:
            return state.ended.popleft()
        if state.playing is not None:
            return None
        while True:
            if state.active is None:
                state.active, combined = state.next_item(self.combine_updates)
                if combined:
                    self.counts["updates_combined"] += combined
                if state.active is None:
                    return None
            item = state.active
            text = item.release(self.sentences)
            if text:
                first = not item.started
                segment = self._segment(participant_id, item, text, first)
                state.playing = segment.token
                return segment
            if not item.closed:
                return None
            if item.gapped:
                self.counts["incomplete"] += 1
            self._finish_active(state, "incomplete" if item.gapped else "completed")
            if state.ended:
                return state.ended.popleft()

    def take_ahead(self, participant_id: str) -> Segment | None:
        """While a segment plays, the next piece of its response to prepare (it plays next:
        the player plays it after :meth:`finished` of the one playing); None when there is
        none yet, or one is already ahead."""
        state = self._participants.get(participant_id)
        if state is None or state.playing is None or state.ahead is not None or state.ended:
            return None
        item = state.active
        if item is None:
            return None
        text = item.release(self.sentences)
        if not text:
            return None
        segment = self._segment(participant_id, item, text, False)
        state.ahead = segment.token
        return segment

    def _segment(self, participant_id: str, item: Item, text: str, first: bool) -> Segment:
        """The next piece ``text`` of ``item`` as a segment under a new token; the item
        has started."""
        self._tokens += 1
        item.started = True
        return Segment(
            participant_id,
            item.number,
            item.kind,
            item.sources,
            item.request_id,
            text,
            item.timestamp_us,
            first,
            item.urgent,
            self._tokens,
        )

    def finished(self, segment: Segment) -> list[Effect]:
        """The player finished (or failed) playing ``segment``; stale segments are ignored.
        The segment handed out ahead, if any, is the one playing now."""
        state = self._participants.get(segment.participant_id)
        if state is None or state.playing != segment.token:
            return []
        state.playing, state.ahead = state.ahead, None
        return [Wake(segment.participant_id)]

    # -- internals --------------------------------------------------------------------

    def _participant(self, participant_id: str) -> ParticipantQueues:
        """The participant's state, made the most recently active; a new one may make the
        ordering forget the least recently active idle participant (else the least recent)."""
        participants = self._participants
        state = participants.pop(participant_id, None)
        if state is None:
            state = ParticipantQueues(participant_id)
            if len(participants) >= self.max_participants:
                victim = next(
                    (pid for pid, other in participants.items() if other.idle()),
                    next(iter(participants)),
                )
                self._forget(participants.pop(victim))
        participants[participant_id] = state
        return state

    def _forget(self, state: ParticipantQueues) -> None:
        for item in (state.active, *state.urgent, *state.replies, *state.updates):
            if item is not None:
                self._discard_stream(item, "evicted")
        self.counts["participants_evicted"] += 1
        self._forgotten.append(Forgotten(state.participant_id))

    def _new_item(
        self,
        state: ParticipantQueues,
        kind: Literal["reply", "update"],
        source: str,
        request_id: str | None,
        message: ResponseOutput,
    ) -> Item:
        self._numbers += 1
        return Item(
            self._numbers,
            state.participant_id,
            kind,
            (source,),
            request_id,
            message.timestamp_us,
            message.text,
        )

    def _drop(
        self, participant_id: str | None, source: str, reason: str, detail: str = ""
    ) -> Dropped:
        self.counts[reason] += 1
        return Dropped(participant_id, source, reason, detail)

    def _reply(
        self,
        state: ParticipantQueues,
        source: str,
        message: ResponseOutput,
        now: float,
        sender: str,
    ) -> list[Effect]:
        participant_id = state.participant_id
        after_gap = sender in state.gap_from
        if after_gap:
            state.gap_from.discard(sender)
        request_id = message.request_id
        assert request_id is not None  # ResponseOutput requires it for replies
        if state.requests.get(request_id):
            return [self._drop(participant_id, source, "superseded", f"request {request_id}")]
        state.remember_request(request_id, self.request_capacity)
        if message.response_id is None:
            return self._enqueue(state, self._new_item(state, "reply", source, request_id, message))
        key = (participant_id, source, message.response_id)
        if key in self._closed:
            return [
                self._drop(
                    participant_id,
                    source,
                    "late",
                    f"stream {message.response_id} closed: {self._closed[key]}",
                )
            ]
        item = self._open.get(key)
        if item is not None:
            item.pending += message.text
            item.last_fragment_at = now
            item.gapped = item.gapped or after_gap
            self._open.move_to_end(key)
            if message.final:
                return self._close_stream(item, "completed")
            return [Wake(participant_id)] if state.active is item else []
        if message.final and not message.text.strip():
            self._remember_closed(key, "terminator without a stream")
            return [
                self._drop(
                    participant_id, source, "unknown_terminator", f"stream {message.response_id}"
                )
            ]
        item = self._new_item(state, "reply", source, request_id, message)
        item.key = key
        item.sender, item.gapped = sender, after_gap
        if message.final:
            self._remember_closed(key, "completed")
            return self._enqueue(state, item)
        item.closed = False
        item.last_fragment_at = now
        self._open[key] = item
        effects: list[Effect] = []
        while len(self._open) > self.max_open_streams:
            effects += self._close_stream(next(iter(self._open.values())), "evicted")
        return effects + self._enqueue(state, item)

    def _enqueue(self, state: ParticipantQueues, item: Item) -> list[Effect]:
        effects: list[Effect] = []
        if item.urgent:
            state.urgent.append(item)
            active = state.active
            if active is not None and not active.urgent:
                effects += self._end_active(state, "cut")
        elif item.kind == "reply":
            state.replies.append(item)
        else:
            state.updates.append(item)
        while state.queued() > self.queue_capacity:
            victim = state.pop_least_valuable()
            self._discard_stream(victim, "evicted")
            effects.append(
                self._drop(
                    state.participant_id,
                    ",".join(victim.sources),
                    "evicted",
                    f"queued {victim.kind} {victim.number}",
                )
            )
        effects.append(Wake(state.participant_id))
        return effects

    def _supersede(
        self, state: ParticipantQueues, reason: EndReason, *, keep: str | None
    ) -> list[Effect]:
        """Mark seen requests superseded; drop their queued replies and the active one."""
        for request_id in state.requests:
            if request_id != keep:
                state.requests[request_id] = True
        effects: list[Effect] = []
        kept: list[Item] = []
        for item in state.replies:
            if state.requests.get(item.request_id or ""):
                self._discard_stream(item, reason)
                effects.append(
                    self._drop(
                        state.participant_id, item.sources[0], reason, f"queued reply {item.number}"
                    )
                )
            else:
                kept.append(item)
        state.replies.clear()
        state.replies.extend(kept)
        active = state.active
        if (
            active is not None
            and active.kind == "reply"
            and state.requests.get(active.request_id or "")
        ):
            effects += self._end_active(state, reason)
        return effects

    def _end_active(self, state: ParticipantQueues, reason: EndReason) -> list[Effect]:
        """Stop the active response now; cut its playing segment."""
        item = state.active
        assert item is not None
        self.counts[reason] += 1
        self._discard_stream(item, reason)
        effects: list[Effect] = []
        if state.playing is not None or state.ahead is not None:
            state.playing = state.ahead = None
            effects.append(Cut(state.participant_id))
        self._finish_active(state, reason)
        effects.append(Wake(state.participant_id))
        return effects

    def _finish_active(self, state: ParticipantQueues, reason: EndReason) -> None:
        item = state.active
        assert item is not None
        state.active = None
        if item.started:
            state.ended.append(
                ResponseEnded(item.participant_id, item.number, item.kind, item.sources, reason)
            )

    def _close_stream(
        self, item: Item, reason: Literal["completed", "idle_timeout", "evicted"]
    ) -> list[Effect]:
        """The stream gets no more fragments; what it received still plays."""
        assert item.key is not None
        self._open.pop(item.key, None)
        self._remember_closed(item.key, reason)
        item.closed = True
        effects: list[Effect] = [Wake(item.participant_id)]
        if reason != "completed":
            self.counts[f"stream_{reason}"] += 1
            effects.insert(0, StreamClosed(item.participant_id, item.key[1], item.key[2], reason))
        return effects

    def _discard_stream(self, item: Item, reason: str) -> None:
        """Forget a dropped response's text and stream; its later fragments count as late."""
        if item.key is not None and not item.closed:
            self._open.pop(item.key, None)
            self._remember_closed(item.key, reason)
            item.closed = True
        item.pending = ""

    def _remember_closed(self, key: StreamKey, reason: str) -> None:
        self._closed[key] = reason
        self._closed.move_to_end(key)
        while len(self._closed) > self.closed_capacity:
            self._closed.popitem(last=False)
