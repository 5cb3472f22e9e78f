"""The router's calls out, each failure-isolated: a destination or the decision service
that fails never fails the turn by raising.

``AgentRouter`` awaits destinations it does not control (local agents, remote proxies,
an application's own). Each call here turns a failure into the outcome the turn policy
(``policy.TurnPolicy``) already has a rule for, and logs it on the turn's logger: a
routing aid that cannot be had makes the destination ineligible (``unreachable``), a
failing decision service chooses none, a failing ``admit()`` counts as a decline (None),
a failing ``answer()`` is reported with its cause and whether the destination had
started, a failing ``release()`` is only logged. Admission and answer run inside the
destination's turn context (``routed_turn``), so it can read the name the router knows
it by.
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from typing import Any

from xrmq.schemas import Admission, AgentTurn, RoutingAid

from .decisions import DecisionService
from .destination import RoutableAgent, RoutingTurnContext, routed_turn, routing_aid_of
from .failure import describe_failure
from .policy import INELIGIBLE


async def routing_aids(
    agents: Mapping[str, RoutableAgent], participant_id: str, log: Any, unreachable: dict[str, str]
) -> dict[str, RoutingAid]:
    """Every destination's routing aid; one that cannot be had makes it ineligible
    (logged, and the reason kept in ``unreachable``)."""

    async def aid(name: str, agent: RoutableAgent) -> RoutingAid:
        try:
            return await routing_aid_of(agent, participant_id)
        except Exception as error:
            log.warning("router.routing_aid_failed", route=name, error=repr(error))
            unreachable[name] = f"unreachable ({describe_failure(error)})"
            return INELIGIBLE

    if len(agents) == 1:  # in this task: gather would start a task and a loop pass
        [(name, agent)] = agents.items()
        return {name: await aid(name, agent)}
    found = await asyncio.gather(*(aid(name, agent) for name, agent in agents.items()))
    return dict(zip(agents, found))


async def decide(
    decisions: DecisionService, turn: AgentTurn, choices: Mapping[str, RoutingAid], log: Any
) -> str | None:
    """The decision service's choice; a failing service chooses none (logged)."""
    try:
        return await decisions.decide(turn, choices)
    except Exception as error:
        log.warning("router.decision_failed", error=repr(error))
        return None


async def admit(
    name: str, agent: RoutableAgent, turn: AgentTurn, focused: bool, log: Any
) -> Admission | None:
    """The destination's admission; None (logged) when ``admit()`` failed."""
    with routed_turn(
        RoutingTurnContext(name, turn.participant_id, turn.turn_id, focused, started_work=False)
    ):
        try:
            return await agent.admit(turn, focused=focused)
        except Exception as error:
            log.warning("router.admit_failed", route=name, error=repr(error))
            return None


async def answer(
    name: str, agent: RoutableAgent, turn: AgentTurn, focused: bool, log: Any
) -> tuple[Any, str | None, bool]:
    """The destination's answer: ``(result, None, began)``, or ``(None, cause, began)``
    (logged) when ``answer()`` failed; ``began`` says whether it had called ``started()``.

    ``started()`` only notes that the answer began: the router says its text before it
    calls ``answer()``.
    """
    began = False

    async def started() -> None:
        nonlocal began
        began = True

    with routed_turn(
        RoutingTurnContext(name, turn.participant_id, turn.turn_id, focused, started_work=False)
    ):
        try:
            result = await agent.answer(turn, started=started)
        except Exception as error:
            log.error("router.answer_failed", route=name, started=began, error=repr(error))
            return None, describe_failure(error), began
    return result, None, began


async def release(name: str, agent: RoutableAgent, participant_id: str, log: Any) -> None:
    """The destination's ``release()``; a failure is logged."""
    try:
        await agent.release(participant_id)
    except Exception as error:
        log.error("router.release_failed", route=name, error=repr(error))
