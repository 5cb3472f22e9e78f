"""The event loop xrmq's own processes run on: uvloop where it is installed.

An actor process spends much of its time in the event loop's own machinery: every
message wakes the loop, every ask resumes a task. asyncio's loop runs that machinery
in Python; uvloop runs it in C. Measured on the bus bench's ask round trip (2 shared
cores): 7 us less CPU per ask in the asking process and 5 us less in the answering
one, and the round trip from 1.33x to 1.22x raw pyzmq.

``AgentRuntime`` itself works on any asyncio loop (the test suite runs its core on
both); this only chooses the loop for the processes xrmq starts itself: the ``xrmq``
commands, the edge box's actor processes and the benchmarks' workers. The environment
variable ``XRMQ_EVENT_LOOP`` (``uvloop`` or ``asyncio``) overrides the choice.
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import Coroutine
from typing import Any, TypeVar

try:
    import uvloop
except ImportError:  # not installed (it is not built for Windows)
    uvloop = None  # type: ignore[assignment]

T = TypeVar("T")

EVENT_LOOPS = ("uvloop", "asyncio")
LOOP_VARIABLE = "XRMQ_EVENT_LOOP"


def event_loop_name(name: str | None = None) -> str:
    """The loop to run on: ``name``, else ``$XRMQ_EVENT_LOOP``, else uvloop if installed."""
    chosen = (
        name or os.environ.get(LOOP_VARIABLE) or ("uvloop" if uvloop is not None else "asyncio")
    )
    if chosen not in EVENT_LOOPS:
        raise ValueError(
            f"{LOOP_VARIABLE}: must be one of {', '.join(EVENT_LOOPS)}, got {chosen!r}"
        )
    if chosen == "uvloop" and uvloop is None:
        raise ValueError(f"{LOOP_VARIABLE}: uvloop is not installed")
    return chosen


def run(main: Coroutine[Any, Any, T], *, loop: str | None = None) -> T:
    """Run ``main`` to completion on a new event loop (see ``event_loop_name``), like
    ``asyncio.run``."""
    if event_loop_name(loop) == "uvloop":
        return uvloop.run(main)
    return asyncio.run(main)
