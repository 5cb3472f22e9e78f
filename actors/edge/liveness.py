"""The supervisor's liveness rule: which ready processes have stopped heartbeating.

Pure: the caller passes the clock, so the rule is tested without waiting. Every
process of an edge box publishes ``RuntimeMetrics`` every ``metrics_interval_s`` (its
heartbeat); a ready incarnation silent for ``timeout_s`` is hung (stopped, deadlocked,
its event loop blocked) and the supervisor kills it, then restarts it as after a crash.
Heartbeats count only from the current incarnation (its pid). The broker has no
heartbeat of its own: the supervisor's own report coming back through it is its probe.
While that probe is silent, or the broker is down (restarting), no heartbeat can
arrive, so only the broker is judged; once it is heard again (or ready again) every
process's clock starts afresh.
"""

from __future__ import annotations

BUS = "bus"
"""The broker's label."""


class LivenessWatch:
    """The last sign of life of every ready incarnation, and of the broker."""

    def __init__(self, timeout_s: float) -> None:
        if not timeout_s > 0:
            raise ValueError("timeout_s: must be > 0")
        self.timeout_s = timeout_s
        self._watched: dict[str, tuple[int, float]] = {}
        """label -> (pid of the ready incarnation, when it was last heard from)."""
        self._bus_resumed = float("-inf")
        self._bus_down = False

    def started(self, label: str, pid: int, now: float) -> None:
        """``label``'s incarnation ``pid`` is ready: its clock starts now."""
        self._watched[label] = (pid, now)
        if label == BUS:
            self._bus_down, self._bus_resumed = False, now

    def stopped(self, label: str) -> None:
        """``label``'s incarnation has ended (or is being killed): it is not judged any more."""
        self._watched.pop(label, None)
        if label == BUS:
            self._bus_down = True

    def heard(self, label: str, pid: int, now: float) -> None:
        """A heartbeat from ``label``'s process ``pid`` (ignored unless it is the ready one)."""
        watched = self._watched.get(label)
        if watched is not None and watched[0] == pid:
            self._watched[label] = (pid, now)

    def bus_heard(self, now: float) -> None:
        """The supervisor's own report came back through the broker."""
        watched = self._watched.get(BUS)
        if watched is None:
            return
        if now - watched[1] > self.timeout_s / 2:  # it was silent: so was everyone's heartbeat
            self._bus_resumed = now
        self._watched[BUS] = (watched[0], now)

    def hung(self, now: float) -> list[tuple[str, float]]:
        """The ready incarnations silent for ``timeout_s`` at ``now``, with for how long."""
        if self._bus_down:
            return []
        bus = self._watched.get(BUS)
        if bus is not None and now - bus[1] > self.timeout_s / 2:
            return [(BUS, now - bus[1])] if now - bus[1] > self.timeout_s else []
        found = []
        for label, (_pid, heard_at) in self._watched.items():
            silent = now - max(heard_at, self._bus_resumed)
            if label != BUS and silent > self.timeout_s:
                found.append((label, silent))
        return found
