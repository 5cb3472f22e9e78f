"""The one exception family every model call raises.

A caller catches ``ModelError`` and gets the model name and the reason; the subclasses
say what kind of failure it was, and ``retryable`` says whether trying again later can
help (services retry such failures themselves, but only before the first chunk).
Cancellation is not an error: ``asyncio.CancelledError`` propagates unchanged.
"""

from __future__ import annotations


class ModelError(Exception):
    """A model call failed. ``str(error)`` reads ``model <model>: <reason>``."""

    retryable: bool = False

    def __init__(self, model: str, reason: str) -> None:
        super().__init__(f"model {model}: {reason}")
        self.model = model
        self.reason = reason


class ModelTimeout(ModelError):
    """No chunk arrived within the request timeout."""

    retryable = True


class ModelRateLimited(ModelError):
    """The provider refused the call for rate or quota reasons."""

    retryable = True


class ModelUnavailable(ModelError):
    """The provider could not be reached or failed on its side (connection, 5xx)."""

    retryable = True


class ContextWindowExceeded(ModelError):
    """The request is larger than the model's context window; shrink it, do not retry."""


class ModelRequestRejected(ModelError):
    """The provider rejected the request itself (bad request, authentication, unknown
    model, content policy); retrying the same request cannot succeed."""
