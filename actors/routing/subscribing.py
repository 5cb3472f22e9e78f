"""Subscriptions chosen at construction time.

The runtime discovers an agent's subscriptions on its *class*, while the router's and
the remote endpoints' topics are constructor arguments. ``subscribed_class`` builds (and
caches) the subclass whose handlers subscribe to the given topics and delegate to
ordinary methods of the base class.
"""

from __future__ import annotations

from functools import cache
from typing import Any

from xrmq.actors.runtime import RuntimeContext, subscribe
from xrmq.topics import Topic


def _delegate(method: str) -> Any:
    async def handler(self: Any, message: Any, ctx: RuntimeContext) -> Any:
        return await getattr(self, method)(message, ctx)

    handler.__name__ = f"on_{method.lstrip('_')}"
    return handler


@cache
def subscribed_class(base: type, handlers: tuple[tuple[Topic, str], ...]) -> type:
    """The subclass of ``base`` in which each ``(topic, method)`` pair is a subscription."""
    namespace: dict[str, Any] = {"__module__": base.__module__, "__qualname__": base.__qualname__}
    for index, (topic, method) in enumerate(handlers):
        namespace[f"_subscription_{index}"] = subscribe(topic)(_delegate(method))
    return type(base.__name__, (base,), namespace)
