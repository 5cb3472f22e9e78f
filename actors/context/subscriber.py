"""``ContextSubscriber``: the agent through which a ContextManager's replica hears the bus.

``ContextManager.subscriber()`` returns one; registering it attaches the manager to that
runtime (``hosting.ManagerRuntime.attach``: local, the section actors and compaction
workers join the same runtime), in ``on_register``, before the runtime starts. It
follows the section views and host restarts of the deployment, and this manager's own
forget barrier and compaction reports, and hands each to the replica
(``replication.ContextReplica``) or the write table (``writes.Writes``) through their
public methods.
"""

from __future__ import annotations

from xrmq.actors.runtime import Agent, AgentRuntime, Handlers, RuntimeContext, superseding

from .hosting import ManagerRuntime
from .messages import CompactReport, ForgetParticipant, HostStarted, SectionView
from .replication import ContextReplica
from .writes import Writes


class ContextSubscriber(Agent):
    """The agent ``ContextManager.subscriber()`` returns: the manager's replica of the
    section views."""

    def __init__(
        self, runtime: ManagerRuntime, replica: ContextReplica, writes: Writes, manager_id: str
    ) -> None:
        self._hosting = runtime
        self._replica = replica
        self._writes = writes
        self._manager_id = manager_id

    def on_register(self) -> None:
        runtime = self.runtime
        assert isinstance(runtime, AgentRuntime)  # register() set it: the one implementation
        self._hosting.attach(runtime, self.name or self._hosting.plan.namespace)

    def handlers(self) -> Handlers:
        """The section views and host restarts every replica follows, and this manager's
        own forget barrier and compaction reports."""
        topics = self._hosting.plan.topics
        return {
            topics.view: self.on_view,
            topics.replica(self._manager_id): self.on_forget,
            topics.host_started: self.on_host_started,
            topics.compacted(self._manager_id): self.on_compacted,
        }

    def gauges(self) -> dict[str, float]:
        """The replica's size and its evictions (``max_participants``), for ``xrmq top``."""
        return {
            "context.replica_participants": float(len(self._replica.participants)),
            "context.replicas_evicted": float(self._replica.evicted),
            "context.replica_fetches": float(self._replica.fetches),
        }

    @superseding(lambda view: (view.section, view.dialogue, view.host, view.epoch))
    async def on_view(self, message: SectionView, ctx: RuntimeContext) -> None:
        """A section's newest view. Views of one section from one host incarnation come from
        one sender in order, and each replaces the previous one whole (its acks are
        cumulative), so a view still queued is superseded by the next (``superseding``);
        and a turn's request is taken before queued views (the runtime's request lane)."""
        if ctx.participant_id is not None:
            self._replica.on_view(ctx.participant_id, message)

    async def on_host_started(self, message: HostStarted, ctx: RuntimeContext) -> None:
        self._replica.on_host_started(message)

    async def on_compacted(self, message: CompactReport, ctx: RuntimeContext) -> None:
        self._writes.report(message)

    async def on_forget(self, message: ForgetParticipant, ctx: RuntimeContext) -> bool:
        if ctx.participant_id is not None:
            self._replica.on_forget(ctx.participant_id, message.generations)
        return True

    async def on_start(self) -> None:
        self._hosting.flush()
        await self._replica.start()

    async def on_stop(self) -> None:
        self._writes.stopped()
