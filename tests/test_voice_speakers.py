"""Many speakers at once: the participants of a voice process share its recognizer fairly."""

from __future__ import annotations

import asyncio

import pytest

from xrmq.actors.runtime import Agent, AgentRuntime, RuntimeContext, subscribe
from xrmq.actors.voice.listener import register_voice_input
from xrmq.actors.voice.mic import send_together
from xrmq.actors.voice.pcm import float_to_pcm16, frames
from xrmq.actors.voice.recognizer_turns import RecognizerTurns
from xrmq.schemas import ResponseOutput, UserQuery
from xrmq.topics import QUERY_TOPIC, VOICE_OUTPUT_TOPIC

from voice_support import np, shared_stt, spoken

SILENCE = np.zeros(8000, np.float32)


def waited_behind_another_at_most_once(order: list[str]) -> bool:
    """Whether, before each turn of a participant (since its previous turn, or the start),
    every other participant had at most one turn."""
    since: dict[str, list[str]] = {who: [] for who in order}
    for who in order:
        if any(since[who].count(other) > 1 for other in set(since[who])):
            return False
        since[who] = []
        for other in since:
            if other != who:
                since[other].append(who)
    return True


async def test_participants_asking_at_once_are_served_round_robin():
    turns = RecognizerTurns()
    order: list[str] = []

    async def speaker(who: str, utterances: int) -> None:
        for _ in range(utterances):
            async with turns.turn(who):
                order.append(who)
                await asyncio.sleep(0)  # recognizing: the others ask meanwhile

    await asyncio.gather(speaker("a", 5), speaker("b", 3), speaker("c", 3), speaker("d", 1))
    assert order == ["a", "b", "c", "d", "a", "b", "c", "a", "b", "c", "a", "a"]
    assert waited_behind_another_at_most_once(order)
    assert turns.holder is None and turns.waiting == [] and turns.granted == 12


def test_the_fairness_check_sees_a_participant_waiting_behind_two_of_anothers():
    assert not waited_behind_another_at_most_once(["a", "a", "b"])


async def test_a_waiting_participant_that_leaves_is_skipped_and_its_turn_passed_on():
    turns = RecognizerTurns()
    order: list[str] = []
    release = asyncio.Event()

    async def hold(who: str) -> None:
        async with turns.turn(who):
            order.append(who)
            await release.wait()

    first = asyncio.ensure_future(hold("a"))
    await asyncio.sleep(0)
    leaving, last = asyncio.ensure_future(hold("b")), asyncio.ensure_future(hold("c"))
    await asyncio.sleep(0)
    assert turns.holder == "a" and turns.waiting == ["b", "c"]
    leaving.cancel()
    release.set()
    await asyncio.gather(first, last)
    assert await asyncio.gather(leaving, return_exceptions=True) != [None]
    assert order == ["a", "c"] and turns.holder is None


async def test_the_recognizer_queue_is_in_the_process_metrics():
    turns = RecognizerTurns()
    release = asyncio.Event()

    async def hold(who: str) -> None:
        async with turns.turn(who):
            await release.wait()

    tasks = [asyncio.ensure_future(hold(who)) for who in ("a", "b", "c")]
    await asyncio.sleep(0)
    assert turns.gauges()["voice.recognizer_waiting"] == 2.0
    assert turns.gauges()["voice.recognizer_busy"] == 1.0
    release.set()
    await asyncio.gather(*tasks)
    gauges = turns.gauges()
    assert (gauges["voice.recognizer_waiting"], gauges["voice.recognizer_busy"]) == (0.0, 0.0)
    assert gauges["voice.recognitions"] == 3.0
    runtime = AgentRuntime()
    register_voice_input(runtime, shared_stt())
    async with runtime:
        assert "voice.recognizer_waiting" in runtime.metrics().gauges


class Queries(Agent):
    def __init__(self) -> None:
        self.queries: list[tuple[str, UserQuery]] = []
        self.changed = asyncio.Event()

    @subscribe(QUERY_TOPIC)
    async def on_query(self, query: UserQuery, ctx: RuntimeContext) -> None:
        self.queries.append((ctx.participant_id or "", query))
        self.changed.set()


@pytest.mark.timeout(180)
async def test_four_participants_speaking_at_once_all_get_answers_none_waiting_behind_another_more_than_one_utterance(  # noqa: E501
    tmp_path,
):
    said = {
        "alice": ("Where did I leave the spare key?", "Is the kettle still hot?"),
        "bob": ("Turn the lights off in the kitchen.", "What is my badge number?"),
        "carol": ("When does the fire drill start?", "Which gate do we meet at?"),
        "dave": ("Which pallet is next to me?", "How many boxes does it hold?"),
    }
    streams = {
        who: list(
            frames(
                float_to_pcm16(
                    np.concatenate(
                        [
                            SILENCE,
                            spoken(tmp_path, f"{who}-1", first),
                            SILENCE,
                            SILENCE,
                            spoken(tmp_path, f"{who}-2", second),
                            SILENCE,
                            SILENCE,
                        ]
                    )
                )
            )
        )
        for who, (first, second) in said.items()
    }
    runtime = AgentRuntime()
    register_voice_input(runtime, shared_stt())
    seen = runtime.register("queries", Queries())
    async with runtime:
        await send_together(runtime, streams, paced=False)  # all at once, frame by frame
        while len(seen.queries) < 8:
            seen.changed.clear()
            await asyncio.wait_for(seen.changed.wait(), 120)
    order = [who for who, _ in seen.queries]
    assert sorted(order) == sorted([*said, *said]), order
    assert waited_behind_another_at_most_once(order), order
    assert all(query.text for _, query in seen.queries)


class Answers(Agent):
    """Each participant's queries and final replies on a box's bus."""

    def __init__(self) -> None:
        self.asked: dict[str, str] = {}
        self.answered: dict[str, str] = {}
        self.changed = asyncio.Event()

    @subscribe(QUERY_TOPIC)
    async def on_query(self, query: UserQuery, ctx: RuntimeContext) -> None:
        self.asked[ctx.metadata.message_id] = ctx.participant_id or ""

    @subscribe(VOICE_OUTPUT_TOPIC)
    async def on_output(self, output: ResponseOutput, ctx: RuntimeContext) -> None:
        if output.final and output.request_id in self.asked:
            self.answered[ctx.participant_id or ""] = output.request_id
            self.changed.set()


@pytest.mark.timeout(240)
async def test_four_participants_speaking_at_once_to_a_box_all_get_answers(tmp_path):
    from xrmq.actors.edge.private_stack import PrivateStack
    from xrmq.actors.edge.voice_demo import QUESTIONS, voice_config

    speakers = ["alice", "bob", "carol", "dave"]
    streams = {
        who: list(
            frames(
                float_to_pcm16(
                    np.concatenate(
                        [SILENCE, spoken(tmp_path, who, QUESTIONS[index % 3]), SILENCE, SILENCE]
                    )
                )
            )
        )
        for index, who in enumerate(speakers)
    }
    async with PrivateStack(voice_config()) as stack:
        runtime = AgentRuntime(stack.bus, name="speakers")
        answers = runtime.register("answers", Answers())
        async with runtime:
            await send_together(runtime, streams)  # four microphones at once
            while len(answers.answered) < len(speakers):
                answers.changed.clear()
                await asyncio.wait_for(answers.changed.wait(), 120)
    assert sorted(answers.answered) == speakers
