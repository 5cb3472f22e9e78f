"""structlog, configured once per process (a leaf module: it imports nothing of xrmq).

Console rendering on a terminal, JSON lines otherwise (a supervisor, CI or a log
shipper reads them); ``XRMQ_LOG_FORMAT=console|json`` overrides the choice (``xrmq up``
on a terminal sets ``console`` for the processes it starts, whose output is a pipe).
Loggers are bound to runtime, actor, participant and turn by the code that knows them:
``get_logger(actor="router").bind(participant="p1", turn="t3")``.

The level is ``XRMQ_LOG_LEVEL``, else WARNING: a program that uses the library (the
examples, an application) prints its own output and the problems, not the runtimes'
lifecycle lines; ``XRMQ_LOG_LEVEL=INFO`` (or ``configure_logging(level=...)`` before the
first log line) shows them. The ``xrmq`` command chooses its own level (``actors/cli.py``:
INFO for ``up``, ``run`` and ``bus``, whose logs are their output).
"""

from __future__ import annotations

import logging
import os
import sys
import threading

import structlog

_configured = False
_lock = threading.Lock()


def configure_logging(*, json: bool | None = None, level: str | int | None = None) -> None:
    """Configure structlog for this process; later calls are no-ops.

    ``json`` defaults to ``XRMQ_LOG_FORMAT`` (``json`` or ``console``), else "stderr is
    not a terminal"; ``level`` defaults to the ``XRMQ_LOG_LEVEL`` environment variable,
    else WARNING.
    """
    global _configured
    with _lock:
        if _configured:
            return
        _configured = True
        if json is None:
            chosen = os.environ.get("XRMQ_LOG_FORMAT", "").lower()
            json = chosen == "json" if chosen in ("json", "console") else not sys.stderr.isatty()
        if level is None:
            level = os.environ.get("XRMQ_LOG_LEVEL", "WARNING")
        if isinstance(level, str):
            level = logging.getLevelNamesMapping().get(level.upper(), logging.WARNING)
        renderer = structlog.processors.JSONRenderer() if json else structlog.dev.ConsoleRenderer()
        structlog.configure(
            processors=[
                structlog.contextvars.merge_contextvars,
                structlog.processors.add_log_level,
                structlog.processors.TimeStamper(fmt="iso", utc=True),
                structlog.processors.format_exc_info if json else structlog.dev.set_exc_info,
                renderer,
            ],
            wrapper_class=structlog.make_filtering_bound_logger(level),
            logger_factory=structlog.PrintLoggerFactory(file=sys.stderr),
            cache_logger_on_first_use=True,
        )


def get_logger(**bindings: object) -> structlog.typing.FilteringBoundLogger:
    """A logger bound to ``bindings`` (runtime, actor, participant, turn...)."""
    configure_logging()
    logger: structlog.typing.FilteringBoundLogger = structlog.get_logger("xrmq").bind(**bindings)
    return logger
