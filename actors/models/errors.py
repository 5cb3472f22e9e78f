"""The one exception family every model call raises.

A caller catches ``ModelError`` and gets the model name, the endpoint it called (when
it has one) and the reason: one clean line a user can act on (``model m at
http://127.0.0.1:8000/v1: connection refused``), never a provider library's repr, which
stays on the exception's ``__cause__`` and in the log. The subclasses say what kind of
failure it was, and ``retryable`` says whether trying again later can
help (services retry such failures themselves, but only before the first chunk).
Cancellation is not an error: ``asyncio.CancelledError`` propagates unchanged.
"""

from __future__ import annotations


class ModelError(Exception):
    """A model call failed. ``str(error)`` reads ``model <model>: <reason>``, or ``model
    <model> at <endpoint>: <reason>`` with an ``endpoint``."""

    retryable: bool = False

    def __init__(self, model: str, reason: str, *, endpoint: str | None = None) -> None:
        where = f"model {model}" if endpoint is None else f"model {model} at {endpoint}"
        super().__init__(f"{where}: {reason}")
        self.model = model
        self.reason = reason
        self.endpoint = endpoint


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
