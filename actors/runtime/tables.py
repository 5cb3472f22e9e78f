"""Bounded tables: the one eviction rule every per-sender, per-key table of the runtime uses.

Anything on the bus can name a new sender, participant, key or inbox, so every table
keyed by such a name has a bound (``capacity``) and evicts when a new entry would
exceed it. The rule is CLOCK (second chance), chosen because it costs nothing on the
hot path: a table is a plain ``dict`` in insertion order whose values are lists, and
``activity`` is a slot of that list the hot path updates anyway (a sequence number).
When the table is over its bound, the oldest entry is looked at: if its activity
changed since the last look it is moved to the end (it is in use), else it is
evicted. An idle entry is evicted before an active one; a table full of active
entries still evicts (the oldest), so the bound always holds.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

EvictHook = Callable[[Any, list[Any]], None]


def evict_over(
    table: dict[Any, list[Any]],
    capacity: int,
    activity: int,
    seen: int,
    on_evict: EvictHook | None = None,
) -> int:
    """Evict until ``len(table) <= capacity``; return how many entries were evicted.

    ``value[activity]`` is what changes while an entry is in use and ``value[seen]`` is
    where this function remembers it between looks. ``on_evict(key, value)`` is told
    about each evicted entry.
    """
    evicted = 0
    looks = 0
    while len(table) > capacity:
        key = next(iter(table))
        value = table[key]
        looks += 1
        if value[activity] != value[seen] and looks <= 2 * len(table):
            value[seen] = value[activity]
            del table[key]
            table[key] = value  # a second chance: to the end
            continue
        del table[key]
        evicted += 1
        if on_evict is not None:
            on_evict(key, value)
    return evicted
