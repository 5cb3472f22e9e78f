"""AgentRouter: route each participant's turns to destinations, one turn at a time.

Rules (upstream xr_ai_routing, docs/design.md "Conversation, routing, voice"), numbered
as the table tests name them:

1. Turns are serialized per participant: a new turn cancels the participant's previous
   turn and waits until it has drained (its destination finalized its output) before
   routing. Other participants are independent. State is kept for at most
   ``max_participants``: beyond, the least recently active idle participant is
   forgotten (else the least recently active one, its turns cancelled).
2. A destination holding the participant's explicit focus is tried first while it is
   eligible. It keeps focus until it releases (``Admission("release")`` or a result with
   ``focus="release"``), becomes ineligible, another destination takes focus, or the
   participant leaves. Declining does not clear focus. When the router drops a focus
   the holder did not give up itself, it calls the holder's ``release()``.
3. Otherwise the decision service chooses among the eligible destinations (those whose
   routing aid could be had and says eligible, and that have not declined). A failing
   service, or a choice that is not a candidate, is no choice (rule 5).
4. The chosen destination's ``admit()`` runs before any speech or work: ``accept``
   answers (``focus=True`` takes focus; ``text`` is an acknowledgement the router says
   first); ``decline`` excludes it and allows one reroute; ``clarify`` ends the turn
   with the router saying its question; ``release`` from the focus holder clears focus
   and routes the same turn normally (from anyone else it counts as a decline). A
   failing ``admit()`` counts as a decline.
5. When the selected destinations declined or none was chosen, an eligible default
   that has not declined gets one answer attempt without admission (a fallback turn).
   Without one, the router says the last decline's text, or ``RouterTexts.unavailable``,
   and the turn is unanswered with every destination's reason (declined, not eligible,
   unreachable).
6. Router-owned text (acknowledgement, clarification, decline, failure) goes to
   ``output(turn, route, text)``, or is published on ``output_topic`` as a
   ``ResponseOutput`` reply to the turn with source "router". It is said before the
   destination starts, so it plays before the destination's reply. A destination that
   fails before its first output (before ``started()``) is reported with
   ``RouterTexts.failure``; one that fails after it has finalized its partial reply,
   and the router then says ``RouterTexts.lost`` (an apology for the rest of the answer).
   An answer that is not a ``DestinationResult`` fails the turn.
7. Every destination receives the same bounded history of completed exchanges (answers
   with response context, and the router's clarifications).
8. A departure cancels and drains the participant's turns, forgets focus and history,
   calls every destination's ``participant_left()`` and then ``cleanup_participant``.
   Registered with a running runtime, the router then confirms it on
   ``forgotten_topic`` with one ``ParticipantForgotten`` naming every destination that
   failed or did not answer in time (its state of the participant may remain): a
   ``ParticipantLeft`` is also the request to forget a participant everywhere
   (``xrmq context clear``, ``/clear``), and this is its answer.
9. Every turn ends once: registered with a running runtime, the router publishes its
   ``TurnEnded`` on ``turn_topic``, then its ``TurnRecord`` on ``record_topic``, after
   everything it said for the turn (``turn_report.py`` has the rule whole).

Where the rules live: rule 1 in ``lanes.py`` (pure lane bookkeeping), rules 2 to 7 in
``policy.TurnPolicy`` (the sans-IO turn policy: decisions in, actions out), rules 8 and 9
in ``policy.departure`` and ``policy.turn_ended``, the turn's record in ``turn_report.py``.
This module is the glue that awaits the destinations and the decision service (through
``destination_calls.py``, which turns each failure into an outcome the policy handles)
and the output, and runs the actions. ``tests/test_router_policy.py`` has table rows
named after each rule.

With ``query_topic`` the router is an actor: register it with the runtime; it turns
each ``UserQuery`` into a turn whose id is the query's message id (the id the voice
renderer supersedes by), cancels a participant's turn on ``interrupted_topic``, and
follows the participant lifecycle topics. Without topics, call ``handle()`` directly.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import Any, TypeVar, cast

from xrmq.actors.clock import now_us
from xrmq.actors.interaction import ResponseOutputs
from xrmq.actors.runtime import (
    Agent,
    Handler,
    Handlers,
    RuntimeClosedError,
    RuntimeContext,
    get_logger,
)
from xrmq.schemas import (
    AgentTurn,
    DestinationResult,
    ForgetFailure,
    Interrupted,
    ParticipantForgotten,
    ParticipantJoined,
    ParticipantLeft,
    PlaybackStages,
    ResponseOutput,
    TurnEnded,
    TurnRecord,
    UserQuery,
)
from xrmq.topics import (
    PARTICIPANT_FORGOTTEN_TOPIC,
    PARTICIPANT_JOINED_TOPIC,
    PARTICIPANT_LEFT_TOPIC,
    ROUTER_SOURCE,
    TURN_ENDED_TOPIC,
    TURNS_TOPIC,
    Topic,
    check_topic,
)

from .decisions import DecisionService
from .destination import RoutableAgent, check_routable
from .destination_calls import admit, answer, decide, release, routing_aids
from .failure import describe_failure
from .lanes import Lane, Lanes
from .playback_join import PlaybackJoin
from .policy import (
    Action,
    Admit,
    Answer,
    Cleanup,
    Decide,
    Done,
    Forget,
    Left,
    Note,
    Release,
    RouteResult,
    RouterTexts,
    Say,
    TurnPolicy,
    departure,
)
from .state import ParticipantRouting
from .turn_report import TurnTimes, report_turn, turn_outcome

__all__ = ["AgentRouter", "RouteResult", "RouterOutput", "RouterTexts"]

T = TypeVar("T")

DEFAULT_HISTORY_LIMIT = 8
DEFAULT_MAX_PARTICIPANTS = 1024
"""Participants the router keeps state (a lane) for; beyond, the least recently active idle
lane is forgotten (else the least recently active one, its turns cancelled)."""

RouterOutput = Callable[[AgentTurn, "str | None", str], Awaitable[None]]
"""``output(turn, route, text)``: say router-owned text for ``turn``; ``route`` is the
destination it concerns, None when no destination is involved."""


class AgentRouter(Agent):
    """Route turns to ``agents`` (name -> ``RoutableAgent``) with ``decisions``.

    ``output`` receives router-owned text; without it the text is published on
    ``output_topic`` (the router must then be registered with a running runtime). One
    of them is required. ``query_topic`` makes the router an actor that also follows
    ``interrupted_topic`` and the ``participant_topics`` (topics carrying
    ``ParticipantJoined`` or ``ParticipantLeft``; a join for a participant the router
    still holds state for is handled as a departure first, so a reused id starts
    afresh). ``cleanup_participant(pid)`` runs after a departure has drained the
    participant's turns; it requires ``query_topic`` and ``output_topic``. ``default``
    names the fallback destination; ``history_limit`` bounds the shared history;
    ``turn_topic`` (carrying ``TurnEnded``; None: not published) receives each turn's end,
    ``record_topic`` (carrying ``TurnRecord``; None: not published) each turn's record,
    ``forgotten_topic`` (carrying ``ParticipantForgotten``; None: not published) each
    departure's confirmation; ``playback_topic`` (carrying a voice renderer's
    ``PlaybackStages``; requires ``query_topic``) makes each record wait for its turn's
    playback stages (``playback_join.py``).
    ``shutdown_grace_s`` is how long ``stop()`` (and so the actor's ``on_stop``) lets
    the turns in flight finish before it cancels them (0: cancel at once).
    """

    def __init__(
        self,
        agents: Mapping[str, RoutableAgent],
        decisions: DecisionService,
        *,
        output: RouterOutput | None = None,
        query_topic: Topic[UserQuery] | None = None,
        output_topic: Topic[ResponseOutput] | None = None,
        interrupted_topic: Topic[Interrupted] | None = None,
        participant_topics: Sequence[Topic[ParticipantJoined] | Topic[ParticipantLeft]] | None = (
            PARTICIPANT_JOINED_TOPIC,
            PARTICIPANT_LEFT_TOPIC,
        ),
        cleanup_participant: Callable[[str], Awaitable[None]] | None = None,
        default: str | None = None,
        history_limit: int = DEFAULT_HISTORY_LIMIT,
        texts: RouterTexts = RouterTexts(),
        max_participants: int = DEFAULT_MAX_PARTICIPANTS,
        shutdown_grace_s: float = 0.0,
        turn_topic: Topic[TurnEnded] | None = TURN_ENDED_TOPIC,
        record_topic: Topic[TurnRecord] | None = TURNS_TOPIC,
        forgotten_topic: Topic[ParticipantForgotten] | None = PARTICIPANT_FORGOTTEN_TOPIC,
        playback_topic: Topic[PlaybackStages] | None = None,
    ) -> None:
        if not isinstance(agents, Mapping) or not agents:
            raise ValueError("AgentRouter.agents: must map at least one name to a RoutableAgent")
        for name, agent in agents.items():
            check_routable("AgentRouter", name, agent)
        if not callable(getattr(decisions, "decide", None)):
            raise ValueError(
                "AgentRouter.decisions: must have an async decide(turn, candidates) method"
            )
        check_topic(query_topic, UserQuery, "AgentRouter.query_topic")
        check_topic(output_topic, ResponseOutput, "AgentRouter.output_topic")
        check_topic(interrupted_topic, Interrupted, "AgentRouter.interrupted_topic")
        check_topic(turn_topic, TurnEnded, "AgentRouter.turn_topic")
        check_topic(record_topic, TurnRecord, "AgentRouter.record_topic")
        check_topic(forgotten_topic, ParticipantForgotten, "AgentRouter.forgotten_topic")
        check_topic(playback_topic, PlaybackStages, "AgentRouter.playback_topic")
        for topic in participant_topics or ():
            if not (
                isinstance(topic, Topic)
                and topic.message_type in (ParticipantJoined, ParticipantLeft)
            ):
                raise ValueError(
                    "AgentRouter.participant_topics: each must be a Topic carrying "
                    "ParticipantJoined or ParticipantLeft"
                )
        if output is None and output_topic is None:
            raise ValueError(
                "AgentRouter.output: give output or output_topic, so the router can say its own "
                "text"
            )
        if cleanup_participant is not None and (query_topic is None or output_topic is None):
            raise ValueError(
                "AgentRouter.cleanup_participant: requires query_topic and output_topic"
            )
        if default is not None and default not in agents:
            raise ValueError(f"AgentRouter.default: {default!r} is not one of the agents")
        if (
            isinstance(history_limit, bool)
            or not isinstance(history_limit, int)
            or history_limit < 0
        ):
            raise ValueError("AgentRouter.history_limit: must be an int >= 0")
        if (
            isinstance(max_participants, bool)
            or not isinstance(max_participants, int)
            or max_participants < 1
        ):
            raise ValueError("AgentRouter.max_participants: must be an int >= 1")
        self.agents: dict[str, RoutableAgent] = dict(agents)
        self.decisions = decisions
        self.output = output
        self.output_topic = output_topic
        self.cleanup_participant = cleanup_participant
        self.default = default
        self.history_limit = history_limit
        self.texts = texts
        self.max_participants = max_participants
        if not shutdown_grace_s >= 0:
            raise ValueError("AgentRouter.shutdown_grace_s: must be >= 0")
        self.shutdown_grace_s = shutdown_grace_s
        self.turn_topic = turn_topic
        self.record_topic = record_topic
        self.record_observers: list[Callable[[TurnRecord], object]] = []
        """Called with each turn's record in this process, after it is published (an
        exporter: ``edge/otlp.py``)."""
        self.forgotten_topic = forgotten_topic
        self.playback = PlaybackJoin() if playback_topic is not None else None
        """Holds each turn's record until its playback stages come (a box with a renderer)."""
        self._lanes: Lanes[asyncio.Task[Any]] = Lanes(max_participants, history_limit)
        """By participant, least recently active first (bounded by ``max_participants``)."""
        self._stopped = False
        self._log = get_logger(actor="router")
        self._handlers: dict[Topic, Handler] = {}
        if query_topic is not None:
            self._handlers[query_topic] = self._on_query
            if interrupted_topic is not None:
                self._handlers[interrupted_topic] = self._on_interrupted
            if playback_topic is not None:
                self._handlers[playback_topic] = self._on_playback
            for topic in participant_topics or ():
                self._handlers[topic] = (
                    self._on_joined if topic.message_type is ParticipantJoined else self._on_left
                )

    def handlers(self) -> Handlers:
        """With ``query_topic``: the query, interrupted and participant topics."""
        return self._handlers

    @property
    def participants_evicted(self) -> int:
        """Participants whose state was forgotten to keep at most ``max_participants``."""
        return self._lanes.evicted

    def gauges(self) -> dict[str, float]:
        return {
            "router.participants": len(self._lanes),
            "router.participants_evicted": self.participants_evicted,
        }

    # -- direct use -----------------------------------------------------------------------

    async def handle(self, turn: AgentTurn) -> RouteResult:
        """Route ``turn`` after cancelling and draining the participant's previous turn.

        Returns how the turn ended; a turn cancelled by a newer turn, an interruption or
        a departure returns ``status="canceled"``. Cancelling the caller cancels the turn.
        """
        task = self.submit(turn)
        try:
            return await task
        except asyncio.CancelledError:
            current = asyncio.current_task()
            if current is not None and current.cancelling():
                raise
            return RouteResult(turn.turn_id, "canceled")

    def submit(self, turn: AgentTurn) -> asyncio.Task[RouteResult]:
        """Start routing ``turn`` (as ``handle`` does) and return its task without awaiting it."""
        return self._submit(turn, TurnTimes(now_us()))

    def _submit(self, turn: AgentTurn, times: TurnTimes) -> asyncio.Task[RouteResult]:
        if self._stopped:
            raise RuntimeError("AgentRouter.handle: the router is stopped")
        if not isinstance(turn, AgentTurn):
            raise ValueError("AgentRouter.handle: turn must be an AgentTurn")
        task = self._enqueue(
            turn.participant_id, lambda lane: self._route(turn, lane, times), turn=True
        )
        task.add_done_callback(
            lambda task: report_turn(
                turn,
                turn_outcome(turn, task),
                times,
                runtime=self.runtime,
                log=self._log,
                turn_topic=self.turn_topic,
                record_topic=self.record_topic,
                observers=self.record_observers,
                playback=self.playback,
            )
        )
        return task

    def interrupt(self, participant_id: str | None = None) -> None:
        """Cancel a participant's turns in flight (every participant's for None); they drain on
        their own."""
        for task in self._lanes.turns(participant_id):
            task.cancel()

    async def participant_left(self, participant_id: str) -> tuple[ForgetFailure, ...]:
        """Cancel and drain the participant's turns, forget their focus and history, tell
        every destination, then run ``cleanup_participant``; return the destinations (and
        the cleanup) that failed, with the cause (empty: all forgot the participant)."""
        return await self._enqueue(
            participant_id, lambda lane: self._depart(participant_id, lane), turn=False
        )

    async def stop(self) -> None:
        """Refuse new turns, let the turns in flight finish for up to ``shutdown_grace_s``,
        cancel what is left and wait until all have drained."""
        self._stopped = True
        pending = self._lanes.pending()
        if pending and self.shutdown_grace_s > 0:
            self._log.info(
                "router.stopping", turns_in_flight=len(pending), grace_s=self.shutdown_grace_s
            )
            await asyncio.wait(pending, timeout=self.shutdown_grace_s)
        self.interrupt()
        pending = self._lanes.pending()
        if pending:
            await asyncio.wait(pending)
        if self.playback is not None:
            self.playback.close()

    # -- the actor --------------------------------------------------------------------------

    async def on_start(self) -> None:
        self._log = get_logger(actor=self.name or "router")

    async def on_stop(self) -> None:
        await self.stop()

    async def _on_playback(self, stages: PlaybackStages, ctx: RuntimeContext) -> None:
        assert self.playback is not None  # subscribed only with a playback topic
        self.playback.report(stages, ctx.metadata.sender)

    async def _on_query(self, query: UserQuery, ctx: RuntimeContext) -> None:
        if ctx.participant_id is None:
            self._log.warning("router.query_without_participant", sender=ctx.metadata.sender)
            return
        times = TurnTimes.of_query(query, ctx.metadata, self.runtime)
        turn = AgentTurn(
            ctx.participant_id,
            ctx.metadata.message_id,
            query.text,
            timestamp_us=query.timestamp_us,
            images=query.images,
        )
        if self._stopped:
            self._log.warning(
                "router.query_refused_stopping", participant=turn.participant_id, turn=turn.turn_id
            )
            return
        self._watch(self._submit(turn, times), turn.participant_id, turn.turn_id)

    async def _on_interrupted(self, message: Interrupted, ctx: RuntimeContext) -> None:
        self._log.info("router.interrupted", participant=ctx.participant_id)
        self.interrupt(ctx.participant_id)

    async def _on_left(self, message: ParticipantLeft, ctx: RuntimeContext) -> None:
        if ctx.participant_id is not None:
            self._watch(
                asyncio.ensure_future(self._forget(ctx.participant_id, ctx.metadata.message_id)),
                ctx.participant_id,
                None,
            )

    async def _on_joined(self, message: ParticipantJoined, ctx: RuntimeContext) -> None:
        pid = ctx.participant_id
        if pid is not None and pid in self._lanes:
            self._log.warning("router.rejoined_without_departure", participant=pid)
            self._watch(asyncio.ensure_future(self._forget(pid, None)), pid, None)

    async def _forget(self, participant_id: str, request_id: str | None) -> None:
        """Rule 8 for a departure heard on the bus: the departure, then its confirmation."""
        failed = await self.participant_left(participant_id)
        runtime = self.runtime
        if self.forgotten_topic is None or runtime is None or not runtime.running:
            return
        runtime.send(
            self.forgotten_topic,
            ParticipantForgotten(request_id, failed),
            participant_id=participant_id,
            source=ROUTER_SOURCE,
        )

    def _watch(self, task: asyncio.Future[Any], participant_id: str, turn_id: str | None) -> None:
        """Log the failure of work the actor started and nobody awaits."""

        def done(task: asyncio.Future[Any]) -> None:
            if not task.cancelled() and task.exception() is not None:
                self._log.error(
                    "router.work_failed",
                    participant=participant_id,
                    turn=turn_id,
                    error=repr(task.exception()),
                )

        task.add_done_callback(done)

    # -- lanes ------------------------------------------------------------------------------

    def _enqueue(
        self, participant_id: str, work: Callable[[Lane[Any]], Awaitable[T]], *, turn: bool
    ) -> asyncio.Task[T]:
        """Run ``work`` after every earlier task of the participant ended, cancelling earlier
        turns (rule 1, ``lanes.py``)."""
        entry = self._lanes.enter(participant_id)
        for earlier in entry.cancel:
            earlier.cancel()
        lane = entry.lane
        task = asyncio.create_task(
            self._after(entry.after, work, lane), name=f"router-{participant_id}"
        )
        lane.add(task, turn=turn)
        task.add_done_callback(lane.done)
        return task

    @staticmethod
    async def _after(
        earlier: frozenset[asyncio.Task[Any]],
        work: Callable[[Lane[Any]], Awaitable[T]],
        lane: Lane[Any],
    ) -> T:
        if earlier:
            await asyncio.wait(earlier)
        return await work(lane)

    async def _depart(self, participant_id: str, lane: Lane[Any]) -> tuple[ForgetFailure, ...]:
        """Rule 8 (``policy.departure``), after the participant's earlier work drained;
        the steps that failed."""
        log = self._log.bind(participant=participant_id)
        steps = departure(self.agents, cleanup=self.cleanup_participant is not None)
        failed: list[ForgetFailure] = []
        for step in steps:
            if isinstance(step, Forget):
                lane.state = ParticipantRouting(self.history_limit)
            elif isinstance(step, Left):
                try:
                    await self.agents[step.route].participant_left(participant_id)
                except Exception as error:
                    log.error("router.participant_left_failed", route=step.route, error=repr(error))
                    failed.append(ForgetFailure(step.route, describe_failure(error)))
            elif isinstance(step, Cleanup) and self.cleanup_participant is not None:
                try:
                    await self.cleanup_participant(participant_id)
                except Exception as error:
                    log.error("router.cleanup_failed", error=repr(error))
                    failed.append(ForgetFailure("cleanup_participant", describe_failure(error)))
        current = asyncio.current_task()
        if current is not None:
            self._lanes.forget(participant_id, lane, current)
        log.info("router.participant_left", failed=[f.route for f in failed])
        return tuple(failed)

    # -- one turn ---------------------------------------------------------------------------

    async def _route(self, turn: AgentTurn, lane: Lane[Any], times: TurnTimes) -> RouteResult:
        """Run the turn's ``TurnPolicy`` (rules 2 to 7): perform each action it returns and
        feed it the outcome of each question, until it is done."""
        log = self._log.bind(participant=turn.participant_id, turn=turn.turn_id)
        unreachable: dict[str, str] = {}
        aids = await routing_aids(self.agents, turn.participant_id, log, unreachable)
        policy = TurnPolicy(
            turn,
            lane.state,
            aids,
            default=self.default,
            texts=self.texts,
            unreachable=unreachable,
        )
        turn = policy.turn  # with the shared history
        actions = policy.start()
        while True:
            *effects, question = actions
            for effect in effects:
                await self._perform(effect, turn, log)
            if isinstance(question, Done):
                return question.result
            actions = await self._ask(policy, question, turn, log, times)

    async def _perform(self, effect: Action, turn: AgentTurn, log: Any) -> None:
        if isinstance(effect, Say):
            await self._say(turn, effect.route, effect.text)
        elif isinstance(effect, Release):
            await release(effect.route, self.agents[effect.route], turn.participant_id, log)
        elif isinstance(effect, Note):
            getattr(log, effect.level)(effect.event, **effect.fields)
        else:
            raise AssertionError(f"AgentRouter: {type(effect).__name__} is not an effect")

    async def _ask(
        self, policy: TurnPolicy, question: Action, turn: AgentTurn, log: Any, times: TurnTimes
    ) -> list[Action]:
        """Await the outcome of ``question`` and hand it to ``policy``; note when the turn was
        routed (the destination asked to admit or, a fallback, to answer) and admitted."""
        if isinstance(question, Decide):
            return policy.decided(await decide(self.decisions, turn, question.candidates, log))
        if isinstance(question, Admit):
            times.route, times.routed_us, times.admitted_us = question.route, now_us(), None
            agent = self.agents[question.route]
            admission = await admit(question.route, agent, turn, question.focused, log)
            if admission is None:
                return policy.admit_failed()
            if admission.disposition == "accept":
                times.admitted_us = now_us()
            return policy.admitted(admission)
        if isinstance(question, Answer):
            if times.route != question.route or times.admitted_us is None:
                times.route, times.routed_us, times.admitted_us = question.route, now_us(), None
            agent = self.agents[question.route]
            result, failure, began = await answer(
                question.route, agent, turn, question.focused, log
            )
            if failure is not None:
                return policy.answer_failed(failure, started=began)
            if isinstance(result, DestinationResult):
                times.stages = result.stages
            return policy.answered(result)
        raise AssertionError(f"AgentRouter: {type(question).__name__} is not a question")

    async def _say(self, turn: AgentTurn, route: str | None, text: str) -> None:
        """Say router-owned text for ``turn``: through ``output``, or as a reply on
        ``output_topic``."""
        if self.output is not None:
            await self.output(turn, route, text)
            return
        if self.runtime is None or not self.runtime.running:
            raise RuntimeClosedError(
                "AgentRouter: publishing on output_topic needs the router registered with a "
                "running runtime"
            )
        # the constructor requires output or output_topic
        output_topic = cast("Topic[ResponseOutput]", self.output_topic)
        outputs = ResponseOutputs(self.runtime, output_topic, source=ROUTER_SOURCE)
        async with outputs.reply(
            turn.participant_id, request_id=turn.turn_id, timestamp_us=turn.timestamp_us
        ) as reply:
            await reply.send(text)
