"""Participant-scoped routing (upstream xr_ai_routing): the router, its decision
services, the destination contract and remote destinations.

- ``agent``: ``RoutableAgent``, the turn context a router sets for destinations.
- ``decisions``: ``DecisionService`` and the built-in services.
- ``state``: pure focus and history state of one participant.
- ``policy``: the turn policy, pure (``TurnPolicy``: decisions in, actions out).
- ``lanes``: per-participant serialization of the router's work, pure bookkeeping.
- ``router``: ``AgentRouter``.
- ``remote``: ``RemoteAgent`` (a destination in another process) and ``DestinationServer``.
"""

from .agent import RoutableAgent, RoutingTurnContext, current_turn_context
from .decisions import DecisionService, KeywordDecisions, LLMDecisions, SingleDestination
from .remote import DestinationServer, RemoteAgent, RemoteAnswerError, remote, serve
from .router import AgentRouter, RouteResult, RouterTexts

__all__ = [
    "AgentRouter",
    "DecisionService",
    "DestinationServer",
    "KeywordDecisions",
    "LLMDecisions",
    "RemoteAgent",
    "RemoteAnswerError",
    "RoutableAgent",
    "RouteResult",
    "RouterTexts",
    "RoutingTurnContext",
    "SingleDestination",
    "current_turn_context",
    "remote",
    "serve",
]
