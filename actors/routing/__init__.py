"""Participant-scoped routing (upstream xr_ai_routing): the router, its decision
services, the destination contract and remote destinations.

- ``destination``: ``RoutableAgent``, the turn context a router sets for destinations, and
  ``answer_prologue``, the start every destination's answer shares.
- ``decisions``: ``DecisionService`` and the built-in services.
- ``state``: pure focus and history state of one participant.
- ``policy``: the turn policy, pure (``TurnPolicy``: decisions in, actions out).
- ``lanes``: per-participant serialization of the router's work, pure bookkeeping.
- ``router``: ``AgentRouter``; ``destination_calls``: its calls to destinations and the
  decision service, each failure an outcome; ``turn_report``: each turn's ``TurnEnded``
  and ``TurnRecord``.
- ``remote_protocol``: the route protocol to a destination in another process (its topics,
  its errors, the exchange); ``remote``: ``RemoteAgent``, the router's proxy for such a
  destination; ``remote_liveness``: the proxy's failure detectors; ``remote_server``:
  ``DestinationServer``, which serves a local destination to proxies.

The names below are loaded on first use (PEP 562, ``xrmq.actors._lazy``): importing the
pure ``policy``, ``lanes`` or ``state`` does not load the router, ZeroMQ or the runtime.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from xrmq.actors._lazy import lazy_exports

if TYPE_CHECKING:  # the same names, typed, for type checkers
    from .decisions import DecisionService, KeywordDecisions, LLMDecisions, SingleDestination
    from .destination import RoutableAgent, RoutingTurnContext, current_turn_context
    from .remote import RemoteAgent, remote
    from .remote_protocol import RemoteAnswerError
    from .remote_server import DestinationServer, serve
    from .router import AgentRouter, RouteResult, RouterTexts

_EXPORTS = {
    "RoutableAgent": ".destination",
    "RoutingTurnContext": ".destination",
    "current_turn_context": ".destination",
    "DecisionService": ".decisions",
    "KeywordDecisions": ".decisions",
    "LLMDecisions": ".decisions",
    "SingleDestination": ".decisions",
    "DestinationServer": ".remote_server",
    "RemoteAgent": ".remote",
    "RemoteAnswerError": ".remote_protocol",
    "remote": ".remote",
    "serve": ".remote_server",
    "AgentRouter": ".router",
    "RouteResult": ".policy",
    "RouterTexts": ".policy",
}

__all__ = sorted(_EXPORTS)

__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS)
