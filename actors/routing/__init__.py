"""Participant-scoped routing (upstream xr_ai_routing): the router, its decision
services, the destination contract and remote destinations.

- ``destination``: ``RoutableAgent``, the turn context a router sets for destinations, and
  ``answer_prologue``, the start every destination's answer shares.
- ``decisions``: ``DecisionService`` and the built-in services.
- ``state``: pure focus and history state of one participant.
- ``policy``: the turn policy, pure (``TurnPolicy``: decisions in, actions out).
- ``lanes``: per-participant serialization of the router's work, pure bookkeeping.
- ``router``: ``AgentRouter``.
- ``remote``: ``RemoteAgent`` (a destination in another process) and ``DestinationServer``.

The names below are loaded on first use (PEP 562, ``xrmq.actors._lazy``): importing the
pure ``policy``, ``lanes`` or ``state`` does not load the router, ZeroMQ or the runtime.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from xrmq.actors._lazy import lazy_exports

if TYPE_CHECKING:  # the same names, typed, for type checkers
    from .decisions import DecisionService, KeywordDecisions, LLMDecisions, SingleDestination
    from .destination import RoutableAgent, RoutingTurnContext, current_turn_context
    from .remote import DestinationServer, RemoteAgent, RemoteAnswerError, remote, serve
    from .router import AgentRouter, RouteResult, RouterTexts

_EXPORTS = {
    "RoutableAgent": ".destination",
    "RoutingTurnContext": ".destination",
    "current_turn_context": ".destination",
    "DecisionService": ".decisions",
    "KeywordDecisions": ".decisions",
    "LLMDecisions": ".decisions",
    "SingleDestination": ".decisions",
    "DestinationServer": ".remote",
    "RemoteAgent": ".remote",
    "RemoteAnswerError": ".remote",
    "remote": ".remote",
    "serve": ".remote",
    "AgentRouter": ".router",
    "RouteResult": ".policy",
    "RouterTexts": ".policy",
}

__all__ = sorted(_EXPORTS)

__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS)
