"""The readiness handshake (``actors/runtime/readiness.py``) alone: one probe per
subscription, resent until it comes back, and a timeout that says what is missing."""

from __future__ import annotations

import asyncio

import pytest

from xrmq.actors.runtime.readiness import PROBE_MARK, Readiness
from xrmq.topics import topic_key

pytestmark = pytest.mark.timeout(10)

SUBSCRIPTIONS = [b"notes\x00", topic_key("voice.query", "p1")]


async def test_each_subscription_gets_a_probe_its_own_prefix_matches_and_start_waits_for_all():
    readiness = Readiness()
    readiness.arm(SUBSCRIPTIONS)
    sent: list[bytes] = []

    def send(key: bytes) -> None:  # the broker hands each probe straight back, once
        if key not in sent:
            sent.append(key)
            asyncio.get_running_loop().call_soon(readiness.returned, key)

    await asyncio.wait_for(readiness.wait(send, 5, lambda: "not ready"), 5)
    assert len(sent) == 2 and readiness.pending() == []
    for prefix, key in zip(
        SUBSCRIPTIONS, sorted(sent, key=lambda key: not key.startswith(b"notes")), strict=True
    ):
        assert key.startswith(prefix) and key.count(b"\x00") == 2
        assert key.split(b"\x00")[2].startswith(PROBE_MARK)


async def test_a_lost_probe_is_sent_again_until_it_returns():
    readiness = Readiness()
    readiness.arm(SUBSCRIPTIONS[:1])
    sends: list[bytes] = []

    def send(key: bytes) -> None:  # the first two sends are lost (a slow joiner)
        sends.append(key)
        if len(sends) == 3:
            asyncio.get_running_loop().call_soon(readiness.returned, key)

    await readiness.wait(send, 5, lambda: "not ready")
    assert len(sends) == 3 and len(set(sends)) == 1


async def test_without_an_answer_start_times_out_naming_what_is_pending():
    readiness = Readiness()
    readiness.arm(SUBSCRIPTIONS)
    with pytest.raises(TimeoutError, match=r"^pending: notes, voice.query$"):
        await readiness.wait(
            lambda key: None, 0.05, lambda: "pending: " + ", ".join(readiness.pending())
        )


def test_an_unknown_control_frame_changes_nothing():
    readiness = Readiness()
    readiness.returned(b"notes\x00\x00?unknown")
    assert readiness.pending() == []


def test_pending_names_the_participants_of_unanswered_subscriptions():
    readiness = Readiness()
    readiness.arm([*SUBSCRIPTIONS, topic_key("voice.output", "p2")])
    assert readiness.pending_participants() == ["p1", "p2"]
