"""The supervisor's liveness rule (pure): which ready processes stopped heartbeating."""

from __future__ import annotations

import pytest

from xrmq.actors.edge.liveness import BUS, LivenessWatch


def test_a_ready_process_silent_for_the_timeout_is_hung():
    watch = LivenessWatch(5.0)
    watch.started("conversation", 100, now=0.0)
    watch.heard("conversation", 100, now=3.0)
    assert watch.hung(7.9) == []
    assert watch.hung(8.5) == [("conversation", 5.5)]
    watch.stopped("conversation")  # killed: not judged again
    assert watch.hung(20.0) == []


def test_only_the_current_incarnation_counts_and_only_once_ready():
    watch = LivenessWatch(5.0)
    watch.heard("router", 7, now=0.0)  # not started: nothing is watched
    assert watch.hung(100.0) == []
    watch.started("router", 8, now=100.0)
    watch.heard("router", 7, now=104.0)  # the previous incarnation's last heartbeat
    assert watch.hung(105.5) == [("router", 5.5)]


def test_while_the_broker_is_silent_only_the_broker_is_judged_then_clocks_restart():
    watch = LivenessWatch(4.0)
    watch.started(BUS, 1, now=0.0)
    watch.started("renderer", 2, now=0.0)
    watch.bus_heard(1.0)
    watch.heard("renderer", 2, now=1.0)
    assert watch.hung(4.0) == []  # the broker is quiet (3 s): nobody is judged yet
    assert watch.hung(5.5) == [(BUS, 4.5)]
    watch.bus_heard(6.0)  # back (say, restarted): the renderer could not be heard meanwhile
    for tick in (7.0, 8.0, 9.0, 10.0):  # the broker answers every tick; the renderer stays silent
        assert watch.hung(tick) == []
        watch.bus_heard(tick)
    assert watch.hung(10.5) == [("renderer", 4.5)]


def test_nobody_is_judged_while_the_broker_is_down_and_clocks_restart_when_it_is_back():
    watch = LivenessWatch(4.0)
    watch.started(BUS, 1, now=0.0)
    watch.started("router", 2, now=0.0)
    watch.stopped(BUS)  # it died: restarting
    assert watch.hung(30.0) == []
    watch.started(BUS, 3, now=31.0)  # ready again: the router's heartbeat can reach us from now on
    for tick in (32.0, 33.0, 34.0, 35.0):  # its probe comes back every tick; the router: silent
        assert watch.hung(tick) == []
        watch.bus_heard(tick)
    assert watch.hung(35.5) == [("router", 4.5)]


def test_the_timeout_must_be_positive():
    with pytest.raises(ValueError, match="timeout_s: must be > 0"):
        LivenessWatch(0)
