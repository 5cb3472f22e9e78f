"""The supervisor's restart policy: exponential backoff, and giving up on a crash loop.

Pure: the caller passes the clock reading, so the policy is tested without waiting.
A crash counts within a sliding window of ``window_s`` seconds; the k-th crash in the
window is restarted after ``backoff_initial_s * 2**(k-1)`` seconds (at most
``backoff_max_s``), and the ``max_crashes``-th crash in the window is not restarted.
Crashes that leave the window are forgotten, so a process that has run well for a
while starts again from the initial delay.
"""

from __future__ import annotations

from collections import deque
from typing import NamedTuple

from .config import RestartPolicyConfig


class RestartDecision(NamedTuple):
    restart: bool
    delay_s: float
    """How long to wait before restarting (0 when giving up)."""
    crashes: int
    """Crashes within the window, this one included."""
    reason: str
    """Why, for the supervisor's log line."""


class RestartPolicy:
    """Decides, for one supervised process, whether and when a crash is restarted."""

    def __init__(self, config: RestartPolicyConfig) -> None:
        self.config = config
        self._crashes: deque[float] = deque()

    def crashed(self, now: float) -> RestartDecision:
        """Record a crash at ``now`` (seconds, monotonic) and decide what follows."""
        config = self.config
        while self._crashes and self._crashes[0] <= now - config.window_s:
            self._crashes.popleft()
        self._crashes.append(now)
        count = len(self._crashes)
        within = f"{count} crash{'es' if count > 1 else ''} within {config.window_s:g}s"
        if count >= config.max_crashes:
            return RestartDecision(False, 0.0, count, f"{within} (limit {config.max_crashes})")
        delay = min(config.backoff_initial_s * 2 ** (count - 1), config.backoff_max_s)
        return RestartDecision(True, delay, count, f"{within}, restarting in {delay:g}s")
