"""What every process of one context deployment must agree on.

The manager, the processes hosting section actors and those hosting compaction workers
are built from the same ``ContextPlan``: the validated section configuration (budgets,
topics, prompts; docs/context.md) plus the deployment settings (namespace, worker pool, job
timeout). Build it with ``context_plan(**kwargs)`` from the ContextManager's keyword
arguments, e.g. from one table of an edge-box config.
"""

from __future__ import annotations

import math
from typing import Any

import msgspec

from xrmq.schemas._validation import is_name

from .config import ContextConfig, context_config
from .messages import ContextTopics

DEFAULT_NAMESPACE = "context"
DEFAULT_COMPACTION_WORKERS = 2
DEFAULT_WORKER_CONCURRENCY = 4
DEFAULT_COMPACTION_TIMEOUT_S = 120.0
DEFAULT_CONTROL_TIMEOUT_S = 5.0


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
    """

    config: ContextConfig
    namespace: str = DEFAULT_NAMESPACE
    compaction_workers: int = DEFAULT_COMPACTION_WORKERS
    worker_concurrency: int = DEFAULT_WORKER_CONCURRENCY
    compaction_timeout_s: float = DEFAULT_COMPACTION_TIMEOUT_S
    control_timeout_s: float = DEFAULT_CONTROL_TIMEOUT_S
    section_hosts: int = 1

    @property
    def topics(self) -> ContextTopics:
        return ContextTopics(self.namespace)


def _count(value: object, parameter: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ValueError(f"{parameter}: must be a positive int, got {value!r}")
    return value


def _seconds(value: object, parameter: str) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or value <= 0:
        raise ValueError(f"{parameter}: must be a positive number of seconds, got {value!r}")
    return float(value)


def context_plan(
    *,
    namespace: str = DEFAULT_NAMESPACE,
    compaction_workers: int = DEFAULT_COMPACTION_WORKERS,
    worker_concurrency: int = DEFAULT_WORKER_CONCURRENCY,
    compaction_timeout_s: float = DEFAULT_COMPACTION_TIMEOUT_S,
    control_timeout_s: float = DEFAULT_CONTROL_TIMEOUT_S,
    section_hosts: int = 1,
    **context: Any,
) -> ContextPlan:
    """Validate a deployment; ``ValueError`` naming the parameter and the rule.

    ``context`` holds the ContextManager's seed parameters (topics, budgets, prompts),
    validated by ``context_config`` with its defaults.
    """
    config = context_config(**context)
    if not is_name(namespace):
        raise ValueError(f"namespace: must be a non-empty string without NUL, got {namespace!r}")
    return ContextPlan(
        config=config,
        namespace=namespace,
        compaction_workers=_count(compaction_workers, "compaction_workers"),
        worker_concurrency=_count(worker_concurrency, "worker_concurrency"),
        compaction_timeout_s=_seconds(compaction_timeout_s, "compaction_timeout_s"),
        control_timeout_s=_seconds(control_timeout_s, "control_timeout_s"),
        section_hosts=_count(section_hosts, "section_hosts"),
    )
