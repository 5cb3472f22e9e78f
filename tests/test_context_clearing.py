"""The clear protocol's pure rounds (``actors/context/clearing.py``): what ``clear`` and
``close`` ask, and what the sections' replies mean for the workers and the replica. The
whole protocol on real actors is ``test_context_manager.py``'s and
``test_context_clear_properties.py``'s."""

from __future__ import annotations

import pytest

from xrmq.actors.context.clearing import ClearAsk, clear_asks, collate
from xrmq.actors.context.compaction import JobRef
from xrmq.actors.context.messages import Cleared, JobAt
from xrmq.actors.context.plan import context_plan

PLAN = context_plan(
    summary_context_topics=("window",), incremental_context_topics=("notes",), namespace="ctx"
)


def _asked(asks: list[ClearAsk]) -> list[tuple[str | None, str, bool]]:
    return [(ask.participant_id, ask.topic.name, ask.message.close) for ask in asks]


def test_clear_asks_each_participants_dialogue_and_every_topic_section():
    assert _asked(clear_asks(PLAN, ["p1", "p2"], close=False)) == [
        ("p1", "ctx.dialogue.clear", False),
        ("p1", "ctx.topic.window.clear", False),
        ("p1", "ctx.topic.notes.clear", False),
        ("p2", "ctx.dialogue.clear", False),
        ("p2", "ctx.topic.window.clear", False),
        ("p2", "ctx.topic.notes.clear", False),
    ]


def test_close_clears_each_dialogue_and_closes_each_topic_section_once_for_everyone():
    assert _asked(clear_asks(PLAN, ["p1", "p2"], close=True)) == [
        ("p1", "ctx.dialogue.clear", False),
        ("p2", "ctx.dialogue.clear", False),
        (None, "ctx.topic.window.clear", True),
        (None, "ctx.topic.notes.clear", True),
    ]


def test_close_with_no_participant_still_closes_the_topic_sections():
    assert _asked(clear_asks(PLAN, [], close=True)) == [
        (None, "ctx.topic.window.clear", True),
        (None, "ctx.topic.notes.clear", True),
    ]


def _job(section: str, number: int, *workers: int) -> JobAt:
    return JobAt(JobRef(section, f"g-{section}", number), "p1", workers)


def test_replies_give_generations_per_participant_and_jobs_per_worker_in_worker_order():
    asks = clear_asks(PLAN, ["p1", "p2"], close=False)
    replies: list[Cleared | BaseException] = [
        Cleared(("d1",), (_job("dialogue", 1, 1),)),
        Cleared(("w1",)),
        Cleared(("n1",), (_job("notes", 2, 1, 0),)),  # retried: sent to both workers
        Cleared(("d2",)),
        TimeoutError("no reply"),
        Cleared(),
    ]
    collated = collate(["p1", "p2"], asks, replies)
    assert [str(error) for error in collated.errors] == ["no reply"]
    assert collated.generations == {"p1": ["d1", "w1", "n1"], "p2": ["d2"]}
    assert list(collated.jobs_by_worker) == [0, 1]
    assert collated.jobs_by_worker[0] == [JobRef("notes", "g-notes", 2)]
    assert collated.jobs_by_worker[1] == [
        JobRef("dialogue", "g-dialogue", 1),
        JobRef("notes", "g-notes", 2),
    ]


def test_a_closed_topic_sections_generations_belong_to_no_participant_but_its_jobs_are_cancelled():
    asks = clear_asks(PLAN, ["p1"], close=True)
    replies: list[Cleared | BaseException] = [
        Cleared(("d1",)),
        Cleared(("w-all",), (_job("window", 3, 0),)),
        Cleared(),
    ]
    collated = collate(["p1"], asks, replies)
    assert collated.generations == {"p1": ["d1"]}
    assert collated.jobs_by_worker == {0: [JobRef("window", "g-window", 3)]}
    assert collated.errors == []


def test_replies_must_match_the_asks_one_to_one():
    with pytest.raises(ValueError):
        collate(["p1"], clear_asks(PLAN, ["p1"], close=False), [Cleared()])
