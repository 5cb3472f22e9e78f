"""The end of a routed turn, reported: rule 9 of ``AgentRouter`` (``router.py``).

Every turn ends once. Registered with a running runtime, the router publishes one
``TurnEnded`` per turn on ``turn_topic`` after everything it said for the turn: how the
turn ended and, for a failed or unanswered turn, the cause (``"<Kind>: <message>"``; a
remote destination's error arrives as it was raised there). A front end ends the turn on
it, so a failure said by the router never leaves a client waiting. A turn cancelled
before it ran (a newer query came at once) ends ``canceled`` too: every query ends once.
Right after it, the router publishes the turn's ``TurnRecord`` on ``record_topic``
(``schemas/turns.py``: when the turn passed each stage, the model's usage and cost; the
destination's stages arrive in its ``DestinationResult``) and logs it as one
``turn.done`` line (also without a runtime), and hands it to its record observers (an
exporter in its process: no bus hop). In a box with a voice renderer the record waits
for the renderer's playback stages (``playback_join.py``). A router that does none of
these (no record topic, its log above INFO, no observer) builds no record. The router
notes a handful of clock reads per turn in its ``TurnTimes`` and publishes once: nothing
per chunk, so recording every turn costs the hot path nothing it would notice.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import msgspec

from xrmq.actors.clock import now_us
from xrmq.schemas import (
    AgentTurn,
    DestinationStages,
    MessageMetadata,
    PlaybackStages,
    TurnEnded,
    TurnRecord,
    UserQuery,
)
from xrmq.topics import ROUTER_SOURCE, Topic

from .failure import describe_failure
from .playback_join import PlaybackJoin
from .policy import RouteResult, turn_ended

PLAYBACK_STAGES = ("first_played", "first_frame", "last_frame")
"""The stages a voice renderer reports (``PlaybackStages``)."""
PLAYBACK_PARTS = ("first_text", "synthesis_start", "synthesis_end")
"""The times of a reply's first piece a voice renderer reports beside its stages."""
SPEECH_PARTS = ("endpoint", "recognition_start", "recognition_end")
"""The times of a spoken query's endpoint and recognition (``UserQuery``)."""


@dataclass(slots=True)
class TurnTimes:
    """What the router notes of one turn for its ``TurnRecord`` (Unix microseconds)."""

    received_us: int
    query_us: int | None = None
    query_crossed: bool = False
    speech: tuple[int, int, int | None] | None = None
    """A spoken query's speech start, speech end and transcript times."""
    speech_parts: dict[str, int] = field(default_factory=dict)
    """A spoken query's ``SPEECH_PARTS`` it carried: name -> Unix microseconds."""
    route: str | None = None
    routed_us: int | None = None
    admitted_us: int | None = None
    stages: DestinationStages | None = None
    client: str | None = None
    """The runtime that published the query."""
    traceparent: str | None = None
    """The query's W3C trace context, when its publisher traces."""

    @classmethod
    def of_query(cls, query: UserQuery, metadata: MessageMetadata, runtime: Any) -> TurnTimes:
        """The times of a turn received now as ``query``: when the query was published, its
        speech times if it was spoken, and whether it crossed from another process than the
        router's ``runtime``."""
        times = cls(now_us())
        times.query_us = metadata.timestamp_us
        if query.speech_end_us is not None:
            times.speech = (query.timestamp_us, query.speech_end_us, query.transcribed_us)
            for part in SPEECH_PARTS:
                value = getattr(query, f"{part}_us")
                if value is not None:
                    times.speech_parts[part] = value
        times.query_crossed = runtime is None or metadata.sender != runtime.name
        times.client, times.traceparent = metadata.sender, metadata.traceparent
        return times


def turn_outcome(turn: AgentTurn, task: asyncio.Task[RouteResult]) -> RouteResult:
    """How a turn's task ended, as its ``RouteResult``. A done callback, not a wrapper
    in the task: a turn cancelled before its task ever ran (queries sent at once) or
    while it waited for the earlier turn to drain ends too, and a coroutine cancelled
    before its first step runs none of its own code."""
    if task.cancelled():
        return RouteResult(turn.turn_id, "canceled")
    error = task.exception()
    if error is not None:
        return RouteResult(turn.turn_id, "failed", error=describe_failure(error))
    return task.result()


def report_turn(
    turn: AgentTurn,
    result: RouteResult,
    times: TurnTimes,
    *,
    runtime: Any,
    log: Any,
    turn_topic: Topic[TurnEnded] | None,
    record_topic: Topic[TurnRecord] | None,
    observers: Sequence[Callable[[TurnRecord], object]] = (),
    playback: PlaybackJoin | None = None,
) -> None:
    """Rule 9: publish the turn's ``TurnEnded`` then its ``TurnRecord`` on the router's
    ``runtime`` (when it runs), log the record on the router's ``log``, then hand it to each
    of the ``observers`` (in this process: an exporter; one that raises is logged, and the
    others still see the record). With ``playback`` (a box with a voice renderer) the record
    of a turn that was not cancelled waits there for the renderer's playback stages. A
    router that neither publishes records, nor logs at INFO, nor has observers builds none:
    telemetry off costs nothing."""
    running = runtime is not None and runtime.running
    name = runtime.name if runtime is not None else None
    enabled = getattr(log, "is_enabled_for", None)
    logged = enabled is None or enabled(logging.INFO)
    recorded = logged or record_topic is not None or bool(observers)
    record = turn_record(turn, result, times, name) if recorded else None
    if running and turn_topic is not None:
        runtime.send(
            turn_topic,
            turn_ended(result),
            participant_id=turn.participant_id,
            source=ROUTER_SOURCE,
        )
    if record is None:
        return
    emit = _Emit(record, runtime, log, logged, record_topic, observers)
    if playback is not None and result.status != "canceled":
        playback.hold(turn.turn_id, emit)
    else:
        emit(None, None)


@dataclass(slots=True)
class _Emit:
    """Publishes, logs and observes one turn's record, with the playback stages when a
    renderer reported them (see ``report_turn``)."""

    record: TurnRecord
    runtime: Any
    log: Any
    logged: bool
    record_topic: Topic[TurnRecord] | None
    observers: Sequence[Callable[[TurnRecord], object]]

    def __call__(self, stages: PlaybackStages | None, renderer: str | None) -> None:
        record = with_playback(self.record, stages, renderer)
        if self.logged:
            fields = msgspec.to_builtins(record)
            del fields["turn_id"], fields["participant_id"]
            self.log.info(
                "turn.done", turn=record.turn_id, participant=record.participant_id, **fields
            )
        if self.record_topic is not None and self.runtime is not None and self.runtime.running:
            self.runtime.send(
                self.record_topic,
                record,
                participant_id=record.participant_id,
                source=ROUTER_SOURCE,
            )
        for observe in self.observers:
            try:
                observe(record)
            except Exception as error:  # an observer's bug must not stop the turn's report
                self.log.warning("turn.observer_failed", turn=record.turn_id, error=repr(error))


def with_playback(
    record: TurnRecord, stages: PlaybackStages | None, renderer: str | None
) -> TurnRecord:
    """``record`` with a renderer's playback stages (those it passed; ``crossed`` when the
    ``renderer`` runtime is not the router's)."""
    if stages is None:
        return record
    found = {
        stage: getattr(stages, f"{stage}_us")
        for stage in PLAYBACK_STAGES
        if getattr(stages, f"{stage}_us") is not None
    }
    parts = {
        part: getattr(stages, f"{part}_us")
        for part in PLAYBACK_PARTS
        if getattr(stages, f"{part}_us") is not None
    }
    if not found:
        return record
    crossed = record.crossed
    if renderer is None or renderer != record.router:
        crossed = (*crossed, *found)
    return msgspec.structs.replace(
        record,
        crossed=crossed,
        renderer=renderer,
        **{f"{name}_us": value for name, value in (found | parts).items()},
    )


def turn_record(
    turn: AgentTurn, result: RouteResult, times: TurnTimes, router: str | None
) -> TurnRecord:
    """The turn's ``TurnRecord``: the router's times, and the destination's stages when
    its answer returned them."""
    stages = times.stages or DestinationStages()
    speech_start, speech_end, transcribed = times.speech or (None, None, None)
    crossed = []
    if times.query_crossed:
        crossed = [
            stage
            for stage, value in (
                ("speech_start", speech_start),
                ("speech_end", speech_end),
                ("transcribed", transcribed),
                ("query", times.query_us),
            )
            if value is not None
        ]
    if router is not None and stages.runtime not in (None, router):
        crossed += [
            stage
            for stage, value in (
                ("model_request", stages.model_request_us),
                ("first_token", stages.first_token_us),
                ("first_chunk", stages.first_chunk_us),
            )
            if value is not None
        ]
    return TurnRecord(
        turn.turn_id,
        turn.participant_id,
        result.status,
        route=result.route,
        error=result.error,
        router=router,
        speech_start_us=speech_start,
        speech_end_us=speech_end,
        transcribed_us=transcribed,
        query_us=times.query_us,
        received_us=times.received_us,
        routed_us=times.routed_us,
        admitted_us=times.admitted_us,
        model_request_us=stages.model_request_us,
        first_token_us=stages.first_token_us,
        first_chunk_us=stages.first_chunk_us,
        ended_us=now_us(),
        model=stages.model,
        usage=stages.usage,
        tool_calls=stages.tool_calls,
        crossed=tuple(crossed),
        client=times.client,
        destination=stages.runtime,
        traceparent=times.traceparent,
        context=stages.context,
        compactions=stages.compactions,
        endpoint_us=times.speech_parts.get("endpoint"),
        recognition_start_us=times.speech_parts.get("recognition_start"),
        recognition_end_us=times.speech_parts.get("recognition_end"),
    )
