"""Every private API the runtime's hot path uses, detected once, each with a public fallback.

Hot path: benchmark before and after a change here (``python -m bench bus turn storm``,
see ``bench/README.md``).

Two private APIs buy measured time on every message; each one is looked up here and
nowhere else, checked at import, and replaced by a public equivalent when it is missing
(a new CPython or pyzmq), so an upgrade costs speed, never correctness:

- ``asyncio.tasks._enter_task`` / ``_leave_task`` let the bus reader start an idle
  actor's handler inline, as the actor's own task (``Mailbox.offer``): a request costs
  no event-loop pass. Fallback: ``INLINE_START`` is False and the request is queued for
  the actor's task, which takes it on the next pass (what a one-way message always
  does). Handlers see the same task and context either way.
- ``zmq.backend.Socket.send``, the Cython base of ``zmq.Socket.send``: the Python
  wrapper only adds the DRAFT ``routing_id``/``group`` arguments, and calling the base
  halves the cost of a three-frame send (bench/README.md). Fallback: the public
  ``zmq.Socket.send``.

``XRMQ_COMPAT_FALLBACK=1`` in the environment forces both fallbacks (the tests run the
mailbox suite that way; it is also a switch to rule these paths out when debugging).
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import Callable
from typing import Any

import zmq

FORCED_FALLBACK = os.environ.get("XRMQ_COMPAT_FALLBACK", "") not in ("", "0")
"""Whether the environment asked for the public fallbacks."""

TaskSwitch = Callable[[asyncio.AbstractEventLoop, "asyncio.Task[Any]"], None]


def _unsupported(loop: asyncio.AbstractEventLoop, task: asyncio.Task[Any]) -> None:
    raise RuntimeError("starting a handler inline is not supported here")


def _task_switch() -> tuple[TaskSwitch, TaskSwitch, bool]:
    enter = getattr(asyncio.tasks, "_enter_task", None)
    leave = getattr(asyncio.tasks, "_leave_task", None)
    if FORCED_FALLBACK or not (callable(enter) and callable(leave)):
        return _unsupported, _unsupported, False
    return enter, leave, True


enter_task, leave_task, INLINE_START = _task_switch()
"""``enter_task(loop, task)`` makes ``task`` the loop's current task (``RuntimeError`` if
another is current, or when ``INLINE_START`` is False); ``leave_task`` undoes it."""


def _frame_send() -> Callable[..., Any]:
    backend = getattr(getattr(zmq, "backend", None), "Socket", None)
    send = getattr(backend, "send", None)
    if FORCED_FALLBACK or not (
        isinstance(backend, type) and issubclass(zmq.Socket, backend) and callable(send)
    ):
        return zmq.Socket.send
    return send


frame_send: Callable[..., Any] = _frame_send()
"""``frame_send(socket, frame, flags)``: send one frame (bytes), as ``socket.send`` does."""
FAST_SEND = frame_send is not zmq.Socket.send
"""Whether ``frame_send`` is pyzmq's Cython base (else the public wrapper)."""
