"""The supervisor's restart policy: exponential backoff and giving up on a crash loop."""

from __future__ import annotations

from xrmq.actors.edge.config import RestartPolicyConfig
from xrmq.actors.edge.restart import RestartPolicy


def policy(**fields) -> RestartPolicy:
    return RestartPolicy(
        RestartPolicyConfig(
            **(
                {"max_crashes": 4, "window_s": 60.0, "backoff_initial_s": 0.5, "backoff_max_s": 3.0}
                | fields
            )
        )
    )


def test_backoff_doubles_per_crash_up_to_the_maximum_then_gives_up():
    restarts = policy(max_crashes=6)
    decisions = [restarts.crashed(float(t)) for t in range(6)]
    assert [d.restart for d in decisions] == [True] * 5 + [False]
    assert [d.delay_s for d in decisions[:5]] == [0.5, 1.0, 2.0, 3.0, 3.0]
    assert [d.crashes for d in decisions] == [1, 2, 3, 4, 5, 6]
    assert decisions[-1].reason == "6 crashes within 60s (limit 6)"
    assert decisions[0].reason == "1 crash within 60s, restarting in 0.5s"


def test_crashes_that_leave_the_window_are_forgotten():
    restarts = policy()
    assert restarts.crashed(0.0).delay_s == 0.5
    assert restarts.crashed(10.0).delay_s == 1.0
    assert restarts.crashed(20.0).delay_s == 2.0
    later = restarts.crashed(75.0)  # the crashes at 0 and 10 are over 60 s old
    assert (later.restart, later.crashes, later.delay_s) == (True, 2, 1.0)
    fresh = restarts.crashed(200.0)
    assert (fresh.crashes, fresh.delay_s) == (1, 0.5)


def test_a_crash_loop_within_the_window_gives_up_at_the_limit():
    restarts = policy(max_crashes=3)
    assert restarts.crashed(0.0).restart
    assert restarts.crashed(1.0).restart
    final = restarts.crashed(59.0)
    assert not final.restart and final.delay_s == 0.0
    assert final.reason == "3 crashes within 60s (limit 3)"


def test_a_limit_of_one_never_restarts():
    assert not policy(max_crashes=1).crashed(0.0).restart
