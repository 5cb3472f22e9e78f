"""Wall-clock time in Unix microseconds, the unit of every timestamp on the wire.

One function, so a component takes ``clock=now_us`` as its default and a test passes its
own clock instead. (The runtime's send path computes the same inline, to save a call.)
"""

from __future__ import annotations

import time


def now_us() -> int:
    """The current Unix time in whole microseconds."""
    return time.time_ns() // 1000
