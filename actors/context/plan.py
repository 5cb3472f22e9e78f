"""What every process of one context deployment must agree on.

The manager, the processes hosting section actors and those hosting compaction workers
are built from the same ``ContextPlan``: the validated section configuration (budgets,
topics, prompts; docs/context.md) plus the deployment settings (namespace, worker pool, job
timeout). Build it with ``context_plan(**kwargs)`` from the ContextManager's keyword
arguments, e.g. from one table of an edge-box config.
"""

from __future__ import annotations

from typing import Any

import msgspec

from xrmq.topics import Topic

from .config import (
    DEFAULT_COMPACTION_TIMEOUT_S,
    DEFAULT_COMPACTION_WORKERS,
    DEFAULT_CONTROL_TIMEOUT_S,
    DEFAULT_MAX_RESIDENT_PARTICIPANTS,
    DEFAULT_NAMESPACE,
    DEFAULT_RETIRE_IDLE_S,
    DEFAULT_WORKER_CONCURRENCY,
    ContextConfig,
    ContextOptions,
    config_of,
    context_options,
)
from .messages import CompactionDone, ContextTopics

__all__ = [
    "DEFAULT_COMPACTION_TIMEOUT_S",
    "DEFAULT_COMPACTION_WORKERS",
    "DEFAULT_CONTROL_TIMEOUT_S",
    "DEFAULT_NAMESPACE",
    "DEFAULT_WORKER_CONCURRENCY",
    "ContextPlan",
    "context_plan",
    "plan_of",
]


class ContextPlan(msgspec.Struct, frozen=True):
    """A validated context deployment.

    - ``namespace`` prefixes every internal topic (``messages.ContextTopics``).
    - ``compaction_workers`` is the size of the worker pool: workers ``0..n-1``, each
      its own actor and mailbox, possibly in different processes.
    - ``worker_concurrency`` bounds the model calls one worker runs at once.
    - ``compaction_timeout_s``: a job without a result by then is sent to the next
      worker (its entries stay meanwhile); after every worker was tried it fails and is
      retried after the section's next entry.
    - ``control_timeout_s`` bounds each clear/cancel round trip of ``clear``/``close``.
    - ``section_hosts``: how many processes (shards) host section actors; host ``i``
      owns dialogue shard ``i`` and answers a replica's resync on its own topics.
    - ``retire_idle_s`` and ``max_resident_participants``: with a journal, a topic
      section keeps in memory only the participants used within ``retire_idle_s`` and
      at most ``max_resident_participants`` of them (least recently used retired
      first); a retired participant lives in the journal alone and is loaded back on
      its next write, fetch, load, compaction or clear (``sections.SectionHost``).
    """

    config: ContextConfig
    namespace: str = DEFAULT_NAMESPACE
    compaction_workers: int = DEFAULT_COMPACTION_WORKERS
    worker_concurrency: int = DEFAULT_WORKER_CONCURRENCY
    compaction_timeout_s: float = DEFAULT_COMPACTION_TIMEOUT_S
    control_timeout_s: float = DEFAULT_CONTROL_TIMEOUT_S
    section_hosts: int = 1
    retire_idle_s: float = DEFAULT_RETIRE_IDLE_S
    max_resident_participants: int = DEFAULT_MAX_RESIDENT_PARTICIPANTS

    @property
    def topics(self) -> ContextTopics:
        return ContextTopics(self.namespace)

    def result_topics(self) -> dict[str, Topic[CompactionDone]]:
        """Every compaction result topic of this deployment, by name
        (``ContextTopics.result_topics``)."""
        return self.topics.result_topics(section.spec.name for section in self.config.topics)


def plan_of(options: ContextOptions) -> ContextPlan:
    """The deployment a checked ``ContextOptions`` describes."""
    return ContextPlan(
        config=config_of(options),
        namespace=options.namespace,
        compaction_workers=options.compaction_workers,
        worker_concurrency=options.worker_concurrency,
        compaction_timeout_s=options.compaction_timeout_s,
        control_timeout_s=options.control_timeout_s,
        section_hosts=options.section_hosts,
        retire_idle_s=options.retire_idle_s,
        max_resident_participants=options.max_resident_participants,
    )


def context_plan(**kwargs: Any) -> ContextPlan:
    """Validate a deployment; ``ValueError`` naming the parameter and the rule.

    ``kwargs`` are ``ContextOptions``'s fields (the ContextManager's section parameters and
    the deployment's), checked by ``context_options`` with their defaults.
    """
    return plan_of(context_options(**kwargs))
