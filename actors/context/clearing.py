"""The distributed clear protocol of ``ContextManager.clear``/``close``, apart from the facade.

Clearing participants takes three rounds over the bus, each awaited before the next:

1. ask every section that may hold them to forget them (``ClearSection`` to the dialogue
   section of each, and to each topic section; on ``close`` the topic sections are cleared
   once, for everyone, and drop every later update);
2. cancel, at each worker, the compaction jobs those sections held (``CancelJobs``): the
   reply comes once their model streams are closed;
3. ask the manager's own replica to drop the views of the generations the sections forgot
   (``ForgetParticipant``), so a view still in flight cannot bring them back.

``clear_asks`` (what to ask in round 1) and ``collate`` (what the replies mean for rounds 2
and 3) are pure and tested alone (``tests/test_context_clearing.py``); ``clear_remote`` is
the thin shell that sends them on a running runtime.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, NamedTuple

from xrmq.topics import Topic

from .compaction import JobRef
from .messages import CancelJobs, Cleared, ClearSection, ForgetParticipant
from .plan import ContextPlan

if TYPE_CHECKING:
    from xrmq.actors.runtime import AgentRuntime


class ClearAsk(NamedTuple):
    """One round-1 ask: the participant it clears (None: every participant of a topic
    section, on close), the section's clear topic and the message."""

    participant_id: str | None
    topic: Topic[ClearSection]
    message: ClearSection


class Collated(NamedTuple):
    """Round 1's replies, sorted for rounds 2 and 3."""

    errors: list[BaseException]
    """Sections that did not answer (their state may remain)."""
    generations: dict[str, list[str]]
    """The generations each participant's sections forgot (round 3)."""
    jobs_by_worker: dict[int, list[JobRef]]
    """The jobs to cancel at each worker (round 2), in worker order."""


def clear_asks(plan: ContextPlan, participants: Sequence[str], *, close: bool) -> list[ClearAsk]:
    """Round 1: one ask per participant's dialogue section, and per topic section (per
    participant, or once with ``close``)."""
    topics = plan.topics
    asks: list[ClearAsk] = []
    for participant_id in participants:
        asks.append(ClearAsk(participant_id, topics.dialogue_clear, ClearSection()))
        if not close:
            asks += [
                ClearAsk(participant_id, topics.topic_clear(section.spec.name), ClearSection())
                for section in plan.config.topics
            ]
    if close:
        asks += [
            ClearAsk(None, topics.topic_clear(section.spec.name), ClearSection(close=True))
            for section in plan.config.topics
        ]
    return asks


def collate(
    participants: Sequence[str],
    asks: Sequence[ClearAsk],
    replies: Sequence[Cleared | BaseException],
) -> Collated:
    """Round 1's replies (in ``asks`` order) as the failures, the generations forgotten per
    participant and the jobs to cancel per worker."""
    errors = [reply for reply in replies if isinstance(reply, BaseException)]
    generations: dict[str, list[str]] = {participant_id: [] for participant_id in participants}
    by_worker: dict[int, list[JobRef]] = {}
    for ask, reply in zip(asks, replies, strict=True):
        if isinstance(reply, BaseException):
            continue
        if ask.participant_id is not None:
            generations[ask.participant_id].extend(reply.generations)
        for job in reply.jobs:
            for worker in job.workers:
                by_worker.setdefault(worker, []).append(job.job)
    return Collated(errors, generations, dict(sorted(by_worker.items())))


async def clear_remote(
    runtime: AgentRuntime,
    plan: ContextPlan,
    manager_id: str,
    participants: Sequence[str],
    *,
    close: bool,
    source: str,
    log: Any,
) -> list[BaseException]:
    """Run the three rounds on a running ``runtime``; return the failures of the sections
    and of the replica that did not answer."""
    topics, timeout = plan.topics, plan.control_timeout_s
    asks = clear_asks(plan, participants, close=close)
    replies = await asyncio.gather(
        *(
            runtime.ask(
                ask.topic,
                ask.message,
                reply_type=Cleared,
                participant_id=ask.participant_id,
                source=source,
                timeout=timeout,
            )
            for ask in asks
        ),
        return_exceptions=True,
    )
    collated = collate(participants, asks, replies)
    cancels = [
        runtime.ask(
            topics.worker_cancel(worker),
            CancelJobs(tuple(jobs)),
            reply_type=int,
            source=source,
            timeout=timeout,
        )
        for worker, jobs in collated.jobs_by_worker.items()
    ]
    outcomes = await asyncio.gather(*cancels, return_exceptions=True)
    for worker, outcome in zip(collated.jobs_by_worker, outcomes, strict=True):
        if isinstance(outcome, BaseException):  # a dead worker runs nothing
            log.warning("context.cancel_unanswered", worker=worker, error=repr(outcome))
    forgets = [
        runtime.ask(
            topics.replica(manager_id),
            ForgetParticipant(tuple(gens)),
            reply_type=bool,
            participant_id=participant_id,
            source=source,
            timeout=timeout,
        )
        for participant_id, gens in collated.generations.items()
    ]
    errors = list(collated.errors)
    for outcome in await asyncio.gather(*forgets, return_exceptions=True):
        if isinstance(outcome, BaseException):
            errors.append(outcome)
    return errors
