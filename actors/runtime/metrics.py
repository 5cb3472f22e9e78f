"""Observation: the runtime's ``RuntimeMetrics`` (its heartbeat, what ``xrmq top`` shows).

``metrics()`` reads the counters (``RuntimeCounters`` names, counted by the hot path in
``AgentRuntime._counters``), the mailboxes, the actors' gauges and the table sizes, and
checks for stuck actors (restarting them with ``restart_stuck``); ``_publish_metrics`` is the
heartbeat loop, ``_publish_heartbeats`` the short one of a runtime without
``metrics_interval`` (its streams' last seqs, once it has published). ``AgentRuntime``
inherits these methods from ``Observation``.
"""

from __future__ import annotations

import asyncio
import os
import time
from typing import TYPE_CHECKING, Any, cast

from xrmq.schemas import RuntimeMetrics
from xrmq.topics import METRICS_TOPIC, registry_counts

if TYPE_CHECKING:
    import structlog

    from xrmq.topics import Topic

    from .mailbox import Mailbox
    from .progress import ProgressWatch
    from .ratelimit import AggregatedWarnings
    from .routes import KeyedKind
    from .security.keys import ClientCredentials
    from .sequence import SequenceTracker


class Observation:
    """The observation methods of ``AgentRuntime`` (see the module docstring); a base of
    ``AgentRuntime`` only."""

    if TYPE_CHECKING:  # the runtime's state these methods use (set by AgentRuntime.__init__)
        name: str
        epoch: int
        credentials: ClientCredentials | None
        metrics_interval: float | None
        restart_stuck: bool
        _running: bool
        _log: structlog.typing.FilteringBoundLogger
        _warnings: AggregatedWarnings
        _progress: ProgressWatch
        _counters: dict[str, int]
        _rejected_by: dict[str, int]
        _evicted_by: dict[str, int]
        _tracker: SequenceTracker
        _streams: dict[tuple[str, str | None], list[Any]]
        _pending: dict[str, Any]
        _agents: dict[str, Mailbox]
        _keyed: dict[str, KeyedKind]

        def send(
            self,
            topic: Topic,
            message: Any,
            *,
            participant_id: str | None = None,
            source: str = ...,
            correlation_id: str | None = None,
            parent_message_id: str | None = None,
            reply_to: str | None = None,
        ) -> str: ...

        def _recent_last_seqs(self) -> dict[str, int]: ...

    def metrics(self, last_seq: dict[str, int] | None = None) -> RuntimeMetrics:
        """This runtime's counters, mailbox depths, faults, table sizes and actor gauges, now."""
        mailboxes = self._all_mailboxes()
        gauges: dict[str, float] = {}
        for mailbox in mailboxes:
            try:
                for name, value in mailbox.agent.gauges().items():
                    gauges[name] = gauges.get(name, 0) + value
            except Exception as error:  # an actor's gauges() must not stop the heartbeat
                mailbox.faults += 1
                self._counters["faults"] += 1
                self._warnings.warn(
                    "actor.gauges_failed",
                    None,
                    None,
                    level="error",
                    actor=mailbox.name,
                    error=repr(error),
                )
        stuck, newly = self._progress.check(
            ((mailbox.name, mailbox.head) for mailbox in mailboxes), time.monotonic()
        )
        for name in newly:
            mailbox = next(m for m in mailboxes if m.name == name)
            self._log.warning(
                "actor.stuck", actor=name, seconds=round(stuck[name], 1), depth=mailbox.depth
            )
            if self.restart_stuck and self._running and mailbox.cancel_stuck():
                self._counters["stuck_restarts"] += 1
                self._log.warning(
                    "actor.stuck_restarted",
                    actor=name,
                    depth=mailbox.depth,
                    seconds=round(stuck[name], 1),
                    stuck_restarts=self._counters["stuck_restarts"],
                )
        names = registry_counts()
        tables = {
            "incoming_streams": len(self._tracker),
            "outgoing_streams": len(self._streams),
            "warnings": len(self._warnings),
            "topic_names": names["held"] + names["transient"],
            "asks_in_flight": len(self._pending),
        }
        for kind, keyed in self._keyed.items():
            tables[f"keyed[{kind}]"] = len(keyed.instances)
        return RuntimeMetrics(
            runtime=self.name,
            epoch=self.epoch,
            pid=os.getpid(),
            timestamp_us=time.time_ns() // 1000,
            actors={mailbox.name: mailbox.depth for mailbox in mailboxes},
            gauges=gauges,
            **cast(dict[str, Any], self._counters),
            rejected_by=dict(self._rejected_by),
            evicted_by={
                **self._evicted_by,
                **({"incoming_streams": self._tracker.evicted} if self._tracker.evicted else {}),
            },
            actor_faults={mailbox.name: mailbox.faults for mailbox in mailboxes if mailbox.faults},
            tables=tables,
            last_seq=last_seq or {},
            resynced=self._tracker.resynced,
            stuck=stuck,
            identity=self.credentials.identity if self.credentials is not None else None,
        )

    async def _publish_metrics(self) -> None:
        while True:
            try:
                self.send(METRICS_TOPIC, self.metrics(self._recent_last_seqs()), source="runtime")
            except Exception as error:
                self._log.error("runtime.metrics_failed", error=repr(error))
            self._warnings.flush()
            await asyncio.sleep(cast(float, self.metrics_interval))  # started only when set

    async def _publish_heartbeats(self, interval: float) -> None:
        """Without ``metrics_interval``: once this runtime has published, a heartbeat every
        ``interval`` announcing its streams' last seqs (``heartbeat_s``)."""
        while True:
            await asyncio.sleep(interval)
            if not self._streams:
                continue  # published nothing yet: no tail to announce
            try:
                self.send(METRICS_TOPIC, self.metrics(self._recent_last_seqs()), source="runtime")
            except Exception as error:
                self._log.error("runtime.heartbeat_failed", error=repr(error))
            self._warnings.flush()

    def _all_mailboxes(self) -> list[Mailbox]:
        mailboxes = list(self._agents.values())
        for keyed in self._keyed.values():
            mailboxes.extend(keyed.instances.values())
        return mailboxes

    def _count_eviction(self, table: str, count: int = 1) -> None:
        self._counters["evicted"] += count
        self._evicted_by[table] = self._evicted_by.get(table, 0) + count
