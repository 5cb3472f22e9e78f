"""Observation: what a runtime counts, logs and reports as ``RuntimeMetrics`` (its heartbeat,
what ``xrmq top`` shows).

``Observation`` owns the counters (``RuntimeCounters`` names: the send and receive paths
increment the one ``counters`` dict they were handed at construction, never through a call),
the per-category tables, the aggregated warnings and the stuck-actor watch. The faults of
an actor's path (a handler's failure, an ``on_start``/``on_stop`` that raised, a mailbox
task that ended) are counted and logged here, once per actor, topic and sender per interval.
``metrics()`` reads the counters, the mailboxes, the actors' gauges and the table sizes, and
restarts stuck actors (``restart_stuck``).
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, cast

import structlog

from xrmq.schemas import MessageMetadata, RuntimeMetrics
from xrmq.schemas.metrics import RUNTIME_COUNTERS
from xrmq.topics import Topic, registry_counts

from .progress import ProgressWatch
from .ratelimit import AggregatedWarnings

if TYPE_CHECKING:
    from .agent import Agent
    from .mailbox import Mailbox
    from .registry import Registry
    from .sequence import SequenceTracker

Reply = Callable[..., None]
"""``AgentRuntime.reply``: how a handler's failure answers its ask."""


class Observation:
    """The counters, warnings and fault accounting of one runtime; see the module docstring."""

    def __init__(
        self,
        name: str,
        log: structlog.typing.FilteringBoundLogger,
        *,
        stuck_after: float,
        warn_interval_s: float,
    ) -> None:
        self.name = name
        self.log = log
        self.warnings = AggregatedWarnings(log, interval_s=warn_interval_s)
        self.counters = dict.fromkeys(RUNTIME_COUNTERS, 0)
        self.rejected_by: dict[str, int] = {}
        self.evicted_by: dict[str, int] = {}
        self.progress = ProgressWatch(stuck_after)

    def count_eviction(self, table: str, count: int = 1) -> None:
        self.counters["evicted"] += count
        self.evicted_by[table] = self.evicted_by.get(table, 0) + count

    async def guarded_hook(self, agent: Agent, hook: str, mailbox: Mailbox | None = None) -> None:
        """Run ``agent.on_start``/``on_stop``; a failure is logged and counted (a fault of
        ``mailbox``'s actor), never propagated."""
        try:
            await getattr(agent, hook)()
        except Exception as error:
            self.counters["handler_errors"] += 1
            self.counters["faults"] += 1
            if mailbox is not None:
                mailbox.faults += 1
            self.log.error(f"actor.{hook}_failed", actor=agent.name, error=repr(error))

    def handler_failed(
        self,
        reply: Reply,
        actor: str,
        topic: Topic,
        metadata: MessageMetadata,
        error: BaseException | str,
    ) -> None:
        """Count and log a handler's failure and answer an ask with the error (``reply``)."""
        self.counters["handler_errors"] += 1
        self.actor_fault(actor, "handler", topic, metadata, error)
        if metadata.reply_to is not None:
            text = repr(error) if isinstance(error, BaseException) else error
            try:
                reply(metadata, None, error=text)
            except Exception as reply_error:
                self.actor_fault(actor, "reply", topic, metadata, reply_error)

    def actor_fault(
        self,
        actor: str,
        step: str,
        topic: Topic,
        metadata: MessageMetadata,
        error: BaseException | str,
    ) -> None:
        """Count a fault in an actor's path and log it, aggregated."""
        self.counters["faults"] += 1
        self.warnings.warn(
            f"actor.{step}_failed",
            topic.name,
            metadata.sender,
            actor=actor,
            participant=metadata.participant_id,
            error=repr(error) if isinstance(error, BaseException) else error,
        )

    def mailbox_restarted(self, actor: str, error: BaseException | None) -> None:
        self.counters["actor_restarts"] += 1
        self.log.error("actor.mailbox_restarted", actor=actor, error=repr(error))

    def metrics(
        self,
        registry: Registry,
        tracker: SequenceTracker,
        *,
        outgoing_streams: int,
        asks_in_flight: int,
        epoch: int,
        restart: bool,
        identity: str | None,
        last_seq: dict[str, int] | None,
        final: bool = False,
    ) -> RuntimeMetrics:
        """The snapshot, with the table sizes the runtime's other parts hold; ``restart``: restart
        the actors found stuck now."""
        mailboxes = registry.all_mailboxes()
        gauges: dict[str, float] = {}
        for mailbox in mailboxes:
            try:
                for name, value in mailbox.agent.gauges().items():
                    gauges[name] = gauges.get(name, 0) + value
            except Exception as error:  # an actor's gauges() must not stop the heartbeat
                mailbox.faults += 1
                self.counters["faults"] += 1
                self.warnings.warn(
                    "actor.gauges_failed",
                    None,
                    None,
                    level="error",
                    actor=mailbox.name,
                    error=repr(error),
                )
        stuck = self._check_stuck(mailboxes, restart)
        names = registry_counts()
        tables = {
            "incoming_streams": len(tracker),
            "outgoing_streams": outgoing_streams,
            "warnings": len(self.warnings),
            "topic_names": names["held"] + names["transient"],
            "asks_in_flight": asks_in_flight,
        }
        for kind, keyed in registry.keyed.items():
            tables[f"keyed[{kind}]"] = len(keyed.instances)
        return RuntimeMetrics(
            runtime=self.name,
            epoch=epoch,
            pid=os.getpid(),
            timestamp_us=time.time_ns() // 1000,
            actors={mailbox.name: mailbox.depth for mailbox in mailboxes},
            gauges=gauges,
            **cast(dict[str, Any], self.counters),
            rejected_by=dict(self.rejected_by),
            evicted_by={
                **self.evicted_by,
                **({"incoming_streams": tracker.evicted} if tracker.evicted else {}),
            },
            actor_faults={mailbox.name: mailbox.faults for mailbox in mailboxes if mailbox.faults},
            tables=tables,
            last_seq=last_seq or {},
            final=final,
            resynced=tracker.resynced,
            stuck=stuck,
            identity=identity,
        )

    def _check_stuck(self, mailboxes: list[Mailbox], restart: bool) -> dict[str, float]:
        """The stuck actors, by seconds stuck; the newly stuck are logged and, with
        ``restart``, restarted."""
        stuck, newly = self.progress.check(
            ((mailbox.name, mailbox.head) for mailbox in mailboxes), time.monotonic()
        )
        for name in newly:
            mailbox = next(m for m in mailboxes if m.name == name)
            self.log.warning(
                "actor.stuck", actor=name, seconds=round(stuck[name], 1), depth=mailbox.depth
            )
            if restart and mailbox.cancel_stuck():
                self.counters["stuck_restarts"] += 1
                self.log.warning(
                    "actor.stuck_restarted",
                    actor=name,
                    depth=mailbox.depth,
                    seconds=round(stuck[name], 1),
                    stuck_restarts=self.counters["stuck_restarts"],
                )
        return stuck
