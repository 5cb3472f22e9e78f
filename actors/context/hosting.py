"""Where a ContextManager's messages go: the runtime it is attached to, or one it starts.

A manager sends over the runtime its subscriber was registered with (``attach``, called
from the subscriber's ``on_register``, before that runtime starts). A manager written to
before any subscriber was registered (one without topics has none) starts a private
runtime of its own on an embedded bus, hosting the same actors, so the SDK works without
a runtime in sight; ``stop`` stops it. Messages sent before the runtime runs wait in an
outbox and go out in order once it starts (``flush``).

Local, attaching also registers the section actors and compaction workers in that
runtime (``host`` is then their section host); split, other processes host them.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any, Literal

from xrmq.actors.models import LLMService
from xrmq.actors.runtime import Agent, AgentRuntime
from xrmq.topics import Topic

from .context_host import ContextHost
from .journal import ContextStore
from .plan import ContextPlan
from .sections import register_sections
from .workers import register_workers

Deployment = Literal["local", "split"]


class ManagerRuntime:
    """The runtime a manager is attached to, or the private one it started, and its outbox."""

    def __init__(
        self,
        plan: ContextPlan,
        llm: LLMService,
        *,
        deployment: Deployment,
        manager_id: str,
        store: ContextStore | None,
        subscriber: Callable[[], Agent],
    ) -> None:
        self.plan = plan
        self.llm = llm
        self.deployment = deployment
        self.store = store
        self.runtime: AgentRuntime | None = None
        """The runtime attached (None before the subscriber is registered)."""
        self.name = plan.namespace
        """The source the manager's messages carry: its subscriber's name."""
        self.host: ContextHost | None = None
        """The local deployment's section host, once attached."""
        self._manager_id = manager_id
        self._subscriber = subscriber
        self._private: AgentRuntime | None = None
        self._starting: asyncio.Task[None] | None = None
        self._outbox: list[tuple[Topic, Any, str]] = []

    @property
    def running(self) -> bool:
        return self.runtime is not None and self.runtime.running

    def attach(self, runtime: AgentRuntime, name: str) -> None:
        """Send over ``runtime`` as ``name``; local, host the sections and workers there."""
        if self.runtime is not None:
            raise RuntimeError(
                "subscriber: this ContextManager is already attached to runtime "
                f"{self.runtime.name!r}"
            )
        self.runtime, self.name = runtime, name
        if self.deployment == "local":
            self.host = register_sections(runtime, self.plan, name=name, store=self.store)
            register_workers(runtime, self.plan, self.llm, name=name)

    def send(self, topic: Topic, message: Any, participant_id: str) -> bool:
        """Send now if the runtime runs (True), else queue until it starts (False); with no
        runtime attached, start the private one."""
        runtime = self.runtime
        if runtime is not None and runtime.running:
            runtime.send(topic, message, participant_id=participant_id, source=self.name)
            return True
        if runtime is None:
            self._start_private()
        self._outbox.append((topic, message, participant_id))
        return False

    def flush(self) -> None:
        """The runtime started: send what waited for it, in order."""
        runtime, outbox, self._outbox = self.runtime, self._outbox, []
        assert runtime is not None  # the subscriber starts only on a runtime
        for topic, message, participant_id in outbox:
            runtime.send(topic, message, participant_id=participant_id, source=self.name)

    def drop(self, participant_id: str) -> None:
        """Forget the queued messages of a participant (cleared before the runtime ran)."""
        self._outbox = [item for item in self._outbox if item[2] != participant_id]

    async def ready(self, operation: str) -> AgentRuntime:
        """The running runtime, starting the private one if none is attached;
        ``RuntimeError`` naming ``operation`` if it does not run."""
        if self.runtime is None:
            self._start_private()
        if self._starting is not None:
            await asyncio.shield(self._starting)
        runtime = self.runtime
        if runtime is None or not runtime.running:
            raise RuntimeError(f"{operation}: the context runtime is not running")
        return runtime

    async def started(self) -> None:
        """Wait until the private runtime, if one is starting, started or failed."""
        if self._starting is not None:
            await asyncio.gather(self._starting, return_exceptions=True)

    async def stop(self) -> None:
        """Drop the outbox; stop the private runtime, if one was started."""
        self._outbox.clear()
        if self._private is not None:
            await self._private.stop()

    def _start_private(self) -> None:
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:
            raise RuntimeError(
                "ContextManager: register subscriber() with a runtime, or write from a running "
                "event loop "
                "(the manager then hosts its actors on a private runtime)"
            ) from None
        runtime = AgentRuntime(name=f"{self.plan.namespace}-{self._manager_id}")
        runtime.register(self.plan.namespace, self._subscriber())
        self._private = runtime
        self._starting = loop.create_task(
            runtime.start(), name=f"xrmq-context-{self._manager_id}-start"
        )
