"""Which topics a recording keeps or a replay publishes: glob patterns over topic names.

Why: a capture holds everything that crossed the bus, including what an edge box makes
itself from its inputs: the router's calls to its destinations (``route.*``), ask
replies (``_inbox.*``), readiness probes, the context sections' internal traffic
(``context.*``), heartbeats (``xrmq.*``), tool calls (``tools.*``), and the answers
(``voice.output``, ``voice.turn_ended``). Replayed onto a running stack, those are made a
second time (the renderer speaks every answer twice), so by default a replay publishes only what
enters a box (queries, interruptions, participant events, context updates) and lets
the stack derive the rest. ``--only`` and ``--exclude`` choose otherwise.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from fnmatch import fnmatchcase

from xrmq.topics import INTERNAL_TOPICS

DERIVED = (*INTERNAL_TOPICS, "voice.output", "voice.turn_ended")
"""Topics an edge box makes itself: left out of a replay unless asked for. The runtime's
internal topics (``xrmq.topics.INTERNAL_TOPICS``, the rule ``xrmq topics`` and ``xrmq
capture show`` hide by) and the answers, which a box derives from the queries."""


@dataclass(frozen=True)
class TopicFilter:
    """Admits a topic matching one of ``only`` (any topic when empty) and none of ``exclude``."""

    only: tuple[str, ...] = ()
    exclude: tuple[str, ...] = ()

    def admits(self, topic: str) -> bool:
        if self.only and not any(fnmatchcase(topic, pattern) for pattern in self.only):
            return False
        return not any(fnmatchcase(topic, pattern) for pattern in self.exclude)


def replay_filter(only: Sequence[str] = (), exclude: Sequence[str] = ()) -> TopicFilter:
    """The filter of ``xrmq replay``: with ``only``, exactly those topics (minus ``exclude``);
    without, every topic but ``DERIVED`` and ``exclude``."""
    if only:
        return TopicFilter(tuple(only), tuple(exclude))
    return TopicFilter((), (*DERIVED, *exclude))
