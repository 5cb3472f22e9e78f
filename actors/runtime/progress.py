"""Stuck actors: a mailbox that holds messages and has not moved for a while.

Pure: the runtime passes each mailbox's name, the delivery at its head and the time,
so the rule is tested without waiting. A mailbox is stuck when the same delivery has
been at its head for ``stuck_after`` seconds: its actor has taken nothing since (a
handler that never returns, a loop blocked inside the actor). An empty mailbox is
never stuck, whatever its handler is doing; a mailbox whose head changes is moving.
Only non-empty mailboxes are remembered, so the table is bounded by the mailboxes.
"""

from __future__ import annotations

from collections.abc import Iterable


class ProgressWatch:
    """Remembers, per non-empty mailbox, since when its head delivery has been the same."""

    def __init__(self, stuck_after: float) -> None:
        if not stuck_after > 0:
            raise ValueError("stuck_after: must be > 0")
        self.stuck_after = stuck_after
        self._heads: dict[str, tuple[object, float]] = {}
        self._reported: set[str] = set()

    def check(
        self, heads: Iterable[tuple[str, object | None]], now: float
    ) -> tuple[dict[str, float], list[str]]:
        """Observe every mailbox's head (None: empty) at ``now``.

        Returns the stuck mailboxes with the seconds since they last moved, and the
        names that became stuck with this observation (to log once per episode).
        """
        previous, self._heads = self._heads, {}
        stuck: dict[str, float] = {}
        for name, head in heads:
            if head is None:
                continue
            seen = previous.get(name)
            since = seen[1] if seen is not None and seen[0] is head else now
            self._heads[name] = (head, since)
            if now - since >= self.stuck_after:
                stuck[name] = now - since
        newly = [name for name in stuck if name not in self._reported]
        self._reported = set(stuck)
        return stuck, newly
