"""Agent classes whose subscriptions are chosen at run time.

``@subscribe`` tags methods when a class is defined, but a context actor's topics come
from configuration (the topic it stands for, its namespace, its worker index). This
builds a subclass whose handlers subscribe to the given topics, once per actor.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, TypeVar

from xrmq.actors.runtime import Agent, subscribe
from xrmq.topics import Topic

A = TypeVar("A", bound=Agent)


def _forward(method: Any) -> Any:
    async def handler(self: Agent, message: Any, ctx: Any) -> Any:
        return await method(self, message, ctx)

    handler.__name__ = method.__name__
    return handler


def bound_agent_type(base: type[A], handlers: Mapping[str, Topic]) -> type[A]:
    """A subclass of ``base`` whose method ``name`` handles messages of ``handlers[name]``."""
    namespace = {name: subscribe(topic)(_forward(getattr(base, name))) for name, topic in handlers.items()}
    return type(base.__name__, (base,), namespace)
