"""A ContextManager's replica of the section views, kept in step with the section hosts.

The replica holds, per participant, the newest view of each section
(``replica.ParticipantReplica``), so a manager renders context locally and never sees a
half-applied change. Views arrive from the bus (the subscriber's ``on_view``); each
acknowledges this manager's writes (``writes.Writes``).

Restarts: every view carries its section host's index and epoch. A replica that sees a
host's new epoch (its views or its ``HostStarted``) resyncs that host from a full
snapshot (``HostSync``), drops the views the host no longer has, and re-sends its writes
the host has not acknowledged. A snapshot comes in pages within the bus's message limit
(``HostSync.after``), each participant's views whole in one page; a host restarted
between pages is read again from its first page. A split manager builds its replica
from every host's snapshot when its runtime starts (``start``), so a restarted
conversation process keeps every participant's context in its prompts.

Scale: the replica holds at most ``max_participants``. Once it evicted one, a participant
it does not hold whole may have context at the hosts: ``ensure`` fetches that
participant's views (one ``HostSync`` of the participant per host) before its context
is rendered.
"""

from __future__ import annotations

import asyncio
from collections import OrderedDict
from typing import Any

from xrmq.actors.runtime import AgentRuntime
from xrmq.actors.runtime.ratelimit import AggregatedWarnings

from .hosting import ManagerRuntime
from .journal import ContextStore, journal_name
from .messages import HostStarted, HostSync, HostViews, SectionView, view_ack
from .plan import ContextPlan
from .replica import ParticipantReplica
from .writes import Writes

DIALOGUE_KEY = "\x00"
"""The dialogue's key among a manager's writes (never a topic name: those have no NUL)."""


class ContextReplica:
    """The section views of every participant the manager holds (``max_participants`` at
    most, least recently used first), and their sync with the section hosts."""

    def __init__(
        self,
        plan: ContextPlan,
        manager_id: str,
        runtime: ManagerRuntime,
        writes: Writes,
        log: Any,
        *,
        max_participants: int,
        snapshot_at_start: bool,
    ) -> None:
        self.plan = plan
        self.participants: OrderedDict[str, ParticipantReplica] = OrderedDict()
        """Participant -> replica, least recently used first (bounded: ``max_participants``)."""
        self.max_participants = max_participants
        self.snapshot_at_start = snapshot_at_start
        self.evicted = 0
        """Participants dropped from the replica over ``max_participants``."""
        self.fetches = 0
        """Participants fetched from the section hosts (``ensure``) after evictions."""
        self.resyncs = 0
        """Full-snapshot resyncs completed (a host restarted, or this manager started)."""
        self.closed = False
        """The manager closed: views are ignored and nothing is fetched or resynced."""
        self._id = manager_id
        self._runtime = runtime
        self._writes = writes
        self._log = log
        self._warnings = AggregatedWarnings(log)
        self._fetching: dict[str, asyncio.Task[bool]] = {}
        self._silent_hosts: dict[int, float] = {}
        """Hosts a fetch timed out on -> the loop time until which fetches skip them (a
        view or ``HostStarted`` of the host ends it early)."""
        self._host_epochs: dict[int, int] = {}
        self._resyncing: dict[int, asyncio.Task[None]] = {}
        self._change: asyncio.Future[None] | None = None

    def recover(self, store: ContextStore) -> None:
        """The replica of a journal's states, rendered here, before any actor runs."""
        sections = {journal_name(section): section for section in self.plan.config.sections}
        for (participant_id, name), recovered in store.recovered.items():
            section = sections.get(name)
            if section is None:
                continue
            state = recovered.state
            view = SectionView(
                section.spec.name,
                section.spec.kind == "dialogue",
                state.generation,
                state.revision,
                section.render(state).blocks,
                *(recovered.acks[-1] if recovered.acks else ("", 0)),
                acks=recovered.acks,
            )
            self.replica(participant_id).apply_view(view, self._id)

    async def start(self) -> None:
        """The runtime started: a split manager that takes a snapshot at start (a
        (re)started conversation process) builds its replica from every host's."""
        if self._runtime.deployment == "split" and self.snapshot_at_start:
            await asyncio.gather(*(self.resync(host) for host in range(self.plan.section_hosts)))

    def replica(self, participant_id: str) -> ParticipantReplica:
        """A participant's replica, made if missing (evicting over ``max_participants``),
        now the most recently used."""
        replica = self.participants.get(participant_id)
        if replica is None:
            replica = self.participants[participant_id] = ParticipantReplica(
                complete=self._complete_by_default
            )
            if len(self.participants) > self.max_participants:
                self._evict(participant_id)
        else:
            self.participants.move_to_end(participant_id)
        return replica

    def on_view(self, participant_id: str, view: SectionView) -> None:
        """A section's newest view of a participant; a host's new epoch starts its resync."""
        if self.closed:
            return
        self._silent_hosts.pop(view.host, None)
        known = self._host_epochs.get(view.host)
        if known is not None and view.epoch < known:
            return  # from an incarnation before the host's restart
        if known is None or view.epoch > known:
            self._host_epochs[view.host] = view.epoch
            if known is not None:
                self._start_resync(view.host)
        self._apply(participant_id, view)
        self.notify()

    def _apply(self, participant_id: str, view: SectionView) -> None:
        self.replica(participant_id).apply_view(view, self._id)
        acked = view_ack(view, self._id)
        if acked:
            self._writes.acknowledged(
                participant_id, DIALOGUE_KEY if view.dialogue else view.section, acked
            )

    def on_host_started(self, started: HostStarted) -> None:
        self._silent_hosts.pop(started.host, None)
        if self._host_epochs.get(started.host) != started.epoch:
            self._start_resync(started.host)

    def on_forget(self, participant_id: str, generations: tuple[str, ...]) -> None:
        """Drop the views of a participant's cleared generations and release its waiters."""
        replica = self.participants.get(participant_id)
        if replica is not None:
            replica.forget(generations)
            if replica.empty:
                del self.participants[participant_id]
        self._writes.release(lambda section, pid, seq: pid == participant_id)
        self.notify()

    @property
    def resyncing(self) -> bool:
        return bool(self._resyncing)

    def _start_resync(self, host: int) -> None:
        if host in self._resyncing or self.closed:
            return
        task = asyncio.get_running_loop().create_task(
            self.resync(host), name=f"xrmq-context-resync-{host}"
        )
        self._resyncing[host] = task
        task.add_done_callback(lambda _: self._resync_done(host, task))

    def _resync_done(self, host: int, task: asyncio.Task[None]) -> None:
        if self._resyncing.get(host) is task:
            del self._resyncing[host]
        self.notify()

    async def resync(self, host: int) -> None:
        """Replace every view of ``host`` by its full snapshot; re-send unacknowledged writes."""
        runtime = self._runtime.runtime
        if runtime is None or not runtime.running:
            return
        present: dict[str, set[str]] = {}
        """Participant -> the sections the snapshot holds."""
        epoch: int | None = None
        after: str | None = None
        pages = views = 0
        while True:
            try:
                page = await runtime.ask(
                    self.plan.topics.host_sync(host),
                    HostSync(after=after, page_bytes=runtime.max_message_bytes),
                    reply_type=HostViews,
                    source=self._runtime.name,
                    timeout=self.plan.control_timeout_s,
                )
            except (TimeoutError, RuntimeError) as error:
                self._log.warning(
                    "context.resync_unanswered", host=host, pages=pages, error=repr(error)
                )
                return
            if self.closed:
                return
            if epoch is not None and page.epoch != epoch and after is not None:
                # the host restarted between pages: its snapshot again, from the start
                present.clear()
                epoch, after = page.epoch, None
                continue
            epoch = page.epoch
            self._host_epochs[host] = max(self._host_epochs.get(host, 0), epoch)
            pages += 1
            views += len(page.views)
            for participant_id, view in page.views:
                self._apply(participant_id, view)
                present.setdefault(participant_id, set()).add(view.section)
            if page.next_after is None:
                break
            after = page.next_after
        for participant_id, replica in list(self.participants.items()):
            replica.drop_host(host, epoch, present.get(participant_id, set()))
            if replica.empty:
                del self.participants[participant_id]
        resent = self._writes.unacknowledged()
        for topic, message, participant_id in resent:
            runtime.send(topic, message, participant_id=participant_id, source=self._runtime.name)
        # Over before it is counted: a task resumed between the count and the done callback
        # must not see ``resyncs`` grown while ``resyncing`` still holds.
        if self._resyncing.get(host) is asyncio.current_task():
            del self._resyncing[host]
        self.resyncs += 1
        self._log.info(
            "context.resynced", host=host, epoch=epoch, pages=pages, views=views, resent=len(resent)
        )
        self.notify()

    def notify(self) -> None:
        """The replica changed: wake whoever waits in ``changed``."""
        if self._change is not None and not self._change.done():
            self._change.set_result(None)

    async def changed(self) -> None:
        if self._change is None or self._change.done():
            self._change = asyncio.get_running_loop().create_future()
        await asyncio.shield(self._change)

    async def synced(self) -> None:
        while (
            self._writes.waiting
            or self._resyncing
            or any(replica.pending for replica in self.participants.values())
        ):
            await self.changed()

    @property
    def _complete_by_default(self) -> bool:
        """Whether a participant the replica does not hold has no context at the hosts:
        so while every view since the start (and every host's snapshot) is here, i.e.
        until the replica first evicts (or for a manager that takes no snapshot at start,
        never)."""
        return self.snapshot_at_start and not self.evicted

    async def ensure(self, participant_id: str) -> bool:
        """Fetch a participant the replica does not hold whole from every section host
        (``ContextManager.ensure``); whether it holds it whole then."""
        replica = self.participants.get(participant_id)
        if replica is not None and replica.complete:
            return True
        if replica is None and self._complete_by_default:
            return True
        fetch = self._fetching.get(participant_id)
        if fetch is None:
            runtime = self._runtime.runtime
            if self.closed or runtime is None or not runtime.running:
                return False
            fetch = asyncio.get_running_loop().create_task(
                self._fetch(runtime, participant_id), name="xrmq-context-fetch"
            )
            self._fetching[participant_id] = fetch
            fetch.add_done_callback(lambda _: self._fetching.pop(participant_id, None))
        return await asyncio.shield(fetch)

    async def _fetch(self, runtime: AgentRuntime, participant_id: str) -> bool:
        """Apply every host's views of one participant; mark it whole if all answered."""
        self.fetches += 1
        loop = asyncio.get_running_loop()
        now = loop.time()
        hosts = [
            host
            for host in range(self.plan.section_hosts)
            if self._silent_hosts.get(host, now) <= now
        ]
        replies = await asyncio.gather(
            *(
                runtime.ask(
                    self.plan.topics.host_sync(host),
                    HostSync(participant_id),
                    reply_type=HostViews,
                    source=self._runtime.name,
                    timeout=self.plan.control_timeout_s,
                )
                for host in hosts
            ),
            return_exceptions=True,
        )
        whole = len(hosts) == self.plan.section_hosts
        for host, reply in zip(hosts, replies):
            if isinstance(reply, BaseException):
                whole = False
                if isinstance(reply, TimeoutError):
                    self._silent_hosts[host] = loop.time() + self.plan.control_timeout_s
                self._log.warning(
                    "context.fetch_unanswered",
                    host=host,
                    participant=participant_id,
                    error=repr(reply),
                )
                continue
            if self.closed:
                return False
            known = self._host_epochs.get(host)
            if known is not None and reply.epoch < known:
                whole = False  # an answer of the host's previous incarnation
                continue
            for pid, view in reply.views:
                if pid == participant_id:
                    self.on_view(pid, view)
        if whole:
            self.replica(participant_id).complete = True
        self.notify()
        return whole

    def _evict(self, keep: str) -> None:
        """Drop the least recently used participant that has no write in flight here."""
        busy = self._writes.busy()
        busy.update(self._fetching)
        busy.add(keep)
        for participant_id, replica in self.participants.items():
            if participant_id not in busy and not replica.pending:
                del self.participants[participant_id]
                self.evicted += 1
                self._warnings.warn(
                    "context.replica_evicted",
                    None,
                    None,
                    participant=participant_id,
                    max_participants=self.max_participants,
                    evicted=self.evicted,
                )
                return

    def close(self) -> None:
        """The manager closed: drop every view, stop resyncs, release every waiter."""
        self.closed = True
        self.participants.clear()
        self._writes.close()
        for task in list(self._resyncing.values()):
            task.cancel()
        self.notify()
