"""The runtime's exceptions, apart so that each part of the runtime raises them without
importing ``AgentRuntime`` (both are public in ``xrmq.actors.runtime``)."""

from __future__ import annotations


class RuntimeClosedError(RuntimeError):
    """The runtime is not running (not started yet, or stopped)."""


class AskError(RuntimeError):
    """The actor that was asked failed while handling the request."""
