"""How a failure is named where it travels: ``"<Kind>: <what happened>"``.

Why: a turn's failure crosses processes (destination -> proxy -> router -> the
``TurnEnded`` a front end prints), so it travels as text that keeps the exception's kind
and message, e.g. ``"ModelUnavailable: model local at
http://127.0.0.1:8000/v1: connection refused"``, never as a ``repr`` with quotes and nesting.
"""

from __future__ import annotations


def describe_failure(error: BaseException) -> str:
    """``"<Kind>: <message>"`` of ``error``; a remote failure's own cause as it arrived."""
    cause = getattr(error, "cause", None)
    if isinstance(cause, str) and cause:
        return cause
    text = str(error).strip()
    kind = type(error).__name__
    return f"{kind}: {text}" if text else kind
