"""A realtime session's background work, and when it is settled.

A session starts work that outlives the event in hand: a connect, a provider event
pump, a close, a boundary watch (``spawn``); a checkpoint summarizing the transcript's
older prefix (``checkpoint``: one at a time; a candidate whose snapshot changed while
it was summarized is discarded and retried up to ``attempts`` times); a rollover
request spawned by a response's end and counted until it is scheduled (``want``).
What the next session is seeded with depends on that work, so ``busy`` says whether a
checkpoint or a rollover request is still running, and ``wait_for`` returns once a
predicate over the session's state holds, re-checked on every ``notify``.

The checkpoint is not one of the spawned tasks: closing the session cancels what it
spawned but lets a checkpoint in progress finish (``drop_checkpoint`` cancels it, for a
participant to be forgotten).
"""

from __future__ import annotations

import asyncio
import contextlib
from collections import Counter
from collections.abc import Awaitable, Callable
from typing import Any

import structlog

from xrmq.actors.models import ChatMessage

from .checkpoint import Checkpointer

Summarize = Callable[[tuple[ChatMessage, ...], str | None], Awaitable[str | None]]


class SessionWork:
    """See the module docstring. ``lock`` is the session's: a checkpoint takes its
    snapshot and commits under it."""

    def __init__(
        self,
        lock: asyncio.Lock,
        *,
        summarize: Summarize | None,
        attempts: int,
        counts: Counter[str],
        log: structlog.typing.FilteringBoundLogger,
    ) -> None:
        self.counts = counts
        self.log = log
        self._lock = lock
        self._summarize = summarize
        self._attempts = attempts
        self._changed = asyncio.Condition()
        self._tasks: set[asyncio.Task[Any]] = set()
        self._checkpointing: asyncio.Task[None] | None = None
        self._wanting = 0
        """Rollover requests spawned by a response's end and not yet scheduled."""

    @property
    def busy(self) -> bool:
        """A checkpoint is being summarized or a rollover request is not yet scheduled."""
        return self._checkpointing is not None or self._wanting > 0

    def spawn(self, coroutine: Awaitable[Any]) -> None:
        task = asyncio.ensure_future(coroutine)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    def want(self, request: Callable[[], Awaitable[None]]) -> None:
        """Spawn a rollover request (``request()``), counted (``busy``) until it returns."""
        self._wanting += 1
        self.spawn(self._wanted(request))

    def checkpoint(self, checkpointer: Checkpointer) -> None:
        """Start a checkpoint of ``checkpointer`` unless one is in progress."""
        if self._checkpointing is None:
            self._checkpointing = asyncio.ensure_future(self._checkpoint(checkpointer))

    async def checkpointed(self) -> None:
        """Return once the checkpoint in progress (if any) committed or failed."""
        checkpointing = self._checkpointing
        if checkpointing is not None:
            with contextlib.suppress(Exception):
                await asyncio.shield(checkpointing)

    async def drop_checkpoint(self) -> None:
        """Cancel the checkpoint in progress: nothing more is summarized."""
        checkpointing = self._checkpointing
        if checkpointing is not None:
            checkpointing.cancel()
            await asyncio.gather(checkpointing, return_exceptions=True)

    async def cancel(self) -> None:
        """Cancel the spawned tasks (not the caller's own) and wait for them."""
        tasks = [task for task in self._tasks if task is not asyncio.current_task()]
        for task in tasks:
            task.cancel()
        for task in tasks:
            with contextlib.suppress(BaseException):
                await task

    async def wait_for(self, predicate: Callable[[], bool]) -> None:
        async with self._changed:
            await self._changed.wait_for(predicate)

    async def notify(self) -> None:
        """The session's state may have changed: re-check every ``wait_for``."""
        async with self._changed:
            self._changed.notify_all()

    async def _wanted(self, request: Callable[[], Awaitable[None]]) -> None:
        try:
            await request()
        finally:
            self._wanting -= 1
            await self.notify()

    async def _checkpoint(self, checkpointer: Checkpointer) -> None:
        try:
            await self._checkpoint_attempts(checkpointer)
        except Exception as error:  # a summarizer that raises: no checkpoint, the seed keeps all
            self.counts["checkpoint_failures"] += 1
            self.log.warning("realtime.checkpoint_failed", error=repr(error))
        finally:
            self._checkpointing = None
        await self.notify()  # settled() waits for it

    async def _checkpoint_attempts(self, checkpointer: Checkpointer) -> None:
        for _ in range(self._attempts):
            async with self._lock:
                snapshot = checkpointer.begin()
            summary: str | None = None
            if snapshot.head and self._summarize is not None:
                head = tuple(ChatMessage(m.role, m.text) for m in snapshot.head if m.text)
                summary = await self._summarize(head, snapshot.previous_summary)
            elif snapshot.head:
                return  # nothing to summarize with: the seed carries the whole transcript
            async with self._lock:
                if checkpointer.commit(snapshot, summary) is not None:
                    self.log.info(
                        "realtime.checkpoint",
                        summarized=len(snapshot.head),
                        tail=len(snapshot.tail),
                        watermark=snapshot.watermark,
                    )
                    return
            self.counts["checkpoint_retries"] += 1
            self.log.info("realtime.checkpoint_discarded", discarded=checkpointer.discarded)
