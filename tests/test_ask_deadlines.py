"""AskDeadlines: one timer fails every pending ask whose deadline passed, and only those."""

from __future__ import annotations

import asyncio

import pytest

from xrmq.actors.runtime.deadlines import AskDeadlines

pytestmark = [pytest.mark.timeout(10), pytest.mark.both_loops]


async def test_an_unanswered_future_fails_with_a_timeout_naming_the_topic():
    loop = asyncio.get_running_loop()
    deadlines = AskDeadlines(loop)
    future = loop.create_future()
    deadlines.add(future, 0.01, "voice.query")
    with pytest.raises(TimeoutError, match=r"no reply on 'voice.query' within 0.01s"):
        await future


async def test_an_answered_future_is_left_alone_when_its_deadline_passes():
    loop = asyncio.get_running_loop()
    deadlines = AskDeadlines(loop)
    answered, unanswered = loop.create_future(), loop.create_future()
    deadlines.add(answered, 0.01, "a")
    deadlines.add(unanswered, 0.02, "b")
    answered.set_result("reply")
    with pytest.raises(TimeoutError):
        await unanswered  # fails after the answered one's deadline passed
    assert answered.result() == "reply"
    assert len(deadlines) == 0


async def test_an_earlier_deadline_added_later_fires_first_and_the_later_one_stays_pending():
    loop = asyncio.get_running_loop()
    deadlines = AskDeadlines(loop)
    late, early = loop.create_future(), loop.create_future()
    deadlines.add(late, 30, "late")
    deadlines.add(early, 0.01, "early")
    with pytest.raises(TimeoutError):
        await early
    assert not late.done()
    deadlines.close()


async def test_answered_entries_are_pruned_so_memory_follows_the_asks_in_flight():
    loop = asyncio.get_running_loop()
    deadlines = AskDeadlines(loop)
    for _ in range(10_000):
        future = loop.create_future()
        deadlines.add(future, 30, "busy")
        future.set_result(None)
    assert len(deadlines) < 1024
    deadlines.close()


async def test_close_stops_the_timer_and_fails_nothing():
    loop = asyncio.get_running_loop()
    deadlines = AskDeadlines(loop)
    future = loop.create_future()
    deadlines.add(future, 0.01, "x")
    deadlines.close()
    done, _ = await asyncio.wait([future], timeout=0.05)  # well past the deadline
    assert not done
