"""Conversation (docs/context.md): one test per rule, against a recording publisher and a context
double."""

from __future__ import annotations

import asyncio

import pytest

from xrmq.actors.conversation import DEFAULT_ROUTING, Conversation, default_system_prompt
from xrmq.actors.models import ChatMessage, ModelError, ScriptedLLM, ScriptedResponse
from xrmq.actors.routing.destination import RoutingTurnContext, routed_turn
from xrmq.schemas import (
    Admission,
    AgentExchange,
    AgentTurn,
    ContextBlock,
    ResponseOutput,
    RoutingAid,
)
from xrmq.topics import VOICE_OUTPUT_TOPIC

NOW_US = 1_714_574_587_000_000  # 2024-05-01 14:43:07 UTC
TURN = AgentTurn(
    "p1", "turn-1", "When is the calibration meeting?", timestamp_us=1_714_574_580_000_000
)


class PublishFailed(Exception):
    pass


class Recorder:
    """Publisher and context double sharing one event log, so tests can assert order."""

    def __init__(
        self, blocks: tuple[ContextBlock, ...] = (), fail_publish_at: int | None = None
    ) -> None:
        self.log: list[tuple] = []
        self.blocks_by_participant = {"p1": blocks}
        self.fail_publish_at = fail_publish_at
        self.publishes = 0
        self._published = asyncio.Event()

    # publisher
    async def publish(self, topic, message, **kwargs) -> None:
        self.publishes += 1
        if self.publishes == self.fail_publish_at:
            raise PublishFailed("consumer gone")
        self.log.append(("frame", topic, message, kwargs))
        self._published.set()

    async def wait_frames(self, count: int) -> None:
        """Return once ``count`` frames were published."""
        while len(self.frames) < count:
            self._published.clear()
            await self._published.wait()

    # context
    def blocks(self, participant_id):
        self.log.append(("blocks", participant_id))
        return self.blocks_by_participant.get(participant_id, ())

    def record_exchange(self, participant_id, request, answer, *, timestamp_us, exchange_id):
        self.log.append(("record", participant_id, request, answer, timestamp_us, exchange_id))

    def reconcile_history(self, participant_id, exchanges, *, exchange_ids):
        self.log.append(("reconcile", participant_id, list(exchanges), list(exchange_ids)))

    async def started(self) -> None:
        self.log.append(("started",))

    @property
    def frames(self) -> list[ResponseOutput]:
        return [entry[2] for entry in self.log if entry[0] == "frame"]

    @property
    def texts(self) -> list[str]:
        return [frame.text for frame in self.frames]

    def kinds(self) -> list[str]:
        return [entry[0] for entry in self.log]


def conversation(llm, recorder: Recorder, **kwargs) -> Conversation:
    return Conversation(
        llm,
        context=recorder,
        runtime=recorder,
        output_topic=VOICE_OUTPUT_TOPIC,
        clock=lambda: NOW_US,
        **kwargs,
    )


# -- prompt layout ------------------------------------------------------------------------

GOLDEN_SYSTEM = (
    "You are a helpful assistant holding a spoken conversation with a person. Answer from your own "
    "knowledge and from the context you are given: the earlier conversation, summaries of it, and "
    "background information that other agents supplied, each shown with the time it was recorded. "
    "When pieces of context disagree, prefer the most recent one, and say so when it matters. If "
    "neither your knowledge nor the context answers the question, say that briefly instead of "
    "guessing. Keep answers short and easy to follow by ear: plain sentences, no lists, markup or "
    "emoji."
    "\n\nAnswer general questions about the lab."
)
GOLDEN_CONTEXT = (
    "Earlier context in time order:\n\n"
    "Summary of earlier conversation: The user asked about lab hours.\n\n"
    "[2024-05-01 14:13:05 UTC] User: Where is room B?\nAssistant: On the second floor.\n\n"
    "[2024-05-01 14:18:00 UTC] [sample.notes] Calibration moved to 15:30.\n\n"
    "Current time: 2024-05-01 14:43:07 UTC"
)


async def test_request_is_three_messages_matching_the_golden_request_byte_for_byte():
    blocks = (
        ContextBlock(None, "Summary of earlier conversation: The user asked about lab hours."),
        ContextBlock(
            1_714_572_785_000_000,
            "[2024-05-01 14:13:05 UTC] User: Where is room B?\nAssistant: On the second floor.",
        ),
        ContextBlock(
            1_714_573_080_000_000,
            "[2024-05-01 14:18:00 UTC] [sample.notes] Calibration moved to 15:30.",
        ),
    )
    recorder = Recorder(blocks)
    llm = ScriptedLLM("At 15:30.")
    await conversation(
        llm, recorder, instructions="Answer general questions about the lab."
    ).answer(TURN, started=recorder.started)
    assert llm.requests[0].messages == (
        ChatMessage("system", GOLDEN_SYSTEM),
        ChatMessage("user", GOLDEN_CONTEXT),
        ChatMessage("user", "When is the calibration meeting?"),
    )


async def test_without_context_the_context_message_is_only_the_current_time():
    recorder = Recorder()
    llm = ScriptedLLM("Hello.")
    await conversation(llm, recorder).answer(TURN, started=recorder.started)
    assert llm.requests[0].messages[1] == ChatMessage(
        "user", "Current time: 2024-05-01 14:43:07 UTC"
    )


async def test_without_instructions_the_system_message_is_the_system_prompt_alone():
    recorder = Recorder()
    llm = ScriptedLLM("Hello.")
    await conversation(llm, recorder).answer(TURN, started=recorder.started)
    assert llm.requests[0].messages[0] == ChatMessage("system", default_system_prompt())


async def test_system_prompt_replaces_the_default_entirely_and_instructions_follow_it():
    recorder = Recorder()
    llm = ScriptedLLM("Hello.")
    await conversation(
        llm, recorder, system_prompt="You are Ada.", instructions="Be brief."
    ).answer(TURN, started=recorder.started)
    assert llm.requests[0].messages[0] == ChatMessage("system", "You are Ada.\n\nBe brief.")


async def test_system_message_holds_no_clock_so_it_is_an_identical_prefix_across_requests():
    recorder = Recorder()
    times = iter([NOW_US, NOW_US + 3_600_000_000])
    llm = ScriptedLLM("One.", "Two.")
    agent = Conversation(
        llm,
        context=recorder,
        runtime=recorder,
        output_topic=VOICE_OUTPUT_TOPIC,
        clock=lambda: next(times),
    )
    await agent.answer(TURN, started=recorder.started)
    await agent.answer(
        AgentTurn("p1", "turn-2", "And now?", timestamp_us=NOW_US), started=recorder.started
    )
    first, second = (request.messages for request in llm.requests)
    assert first[0] == second[0]
    assert first[1] != second[1]  # the current time moved, in the context message only


def test_default_system_prompt_is_a_general_assistant_without_tools_camera_or_clock():
    prompt = default_system_prompt().lower()
    assert "own knowledge" in prompt and "context" in prompt
    for claim in ("tool", "camera", "see ", "vision", "current time", "today"):
        assert claim not in prompt
    assert not any(character.isdigit() for character in prompt)


# -- publishing ---------------------------------------------------------------------------


async def test_reply_frames_answer_the_turn_id_with_the_routing_name_and_the_turn_timestamp():
    recorder = Recorder()
    with routed_turn(RoutingTurnContext("lab-chat", "p1", "turn-1", False)):
        await conversation(ScriptedLLM("At 15:30."), recorder).answer(
            TURN, started=recorder.started
        )
    frames = [entry for entry in recorder.log if entry[0] == "frame"]
    assert [(topic, kwargs) for _, topic, _, kwargs in frames] == [
        (VOICE_OUTPUT_TOPIC, {"participant_id": "p1", "source": "lab-chat"})
    ] * 3
    response_id = frames[0][2].response_id
    assert [message for _, _, message, _ in frames] == [
        ResponseOutput(
            "reply",
            "At",
            "turn-1",
            response_id=response_id,
            final=False,
            timestamp_us=TURN.timestamp_us,
        ),
        ResponseOutput(
            "reply",
            " 15:30.",
            "turn-1",
            response_id=response_id,
            final=False,
            timestamp_us=TURN.timestamp_us,
        ),
        ResponseOutput(
            "reply",
            "",
            "turn-1",
            response_id=response_id,
            final=True,
            timestamp_us=TURN.timestamp_us,
        ),
    ]


async def test_outside_a_router_the_source_is_conversation():
    recorder = Recorder()
    await conversation(ScriptedLLM("Hi."), recorder).answer(TURN, started=recorder.started)
    assert {entry[3]["source"] for entry in recorder.log if entry[0] == "frame"} == {"conversation"}


async def test_first_nonblank_chunk_awaits_started_before_it_is_published():
    recorder = Recorder()
    llm = ScriptedLLM(ScriptedResponse(chunks=("  ", "\n", "Hello", " there.")))
    await conversation(llm, recorder).answer(TURN, started=recorder.started)
    events = [kind for kind in recorder.kinds() if kind in ("started", "frame")]
    assert events == ["started", "frame", "frame", "frame"]
    assert recorder.texts == ["Hello", " there.", ""]


async def test_complete_text_is_returned_as_routing_context():
    recorder = Recorder()
    result = await conversation(ScriptedLLM("At 15:30 in room B."), recorder).answer(
        TURN, started=recorder.started
    )
    assert (result.response, result.focus) == ("At 15:30 in room B.", None)


async def test_failure_after_the_first_chunk_closes_the_reply_with_an_empty_final_and_raises():
    recorder = Recorder()
    llm = ScriptedLLM(
        ScriptedResponse(
            "one two three", error=ModelError("scripted", "boom"), error_after_chunks=2
        )
    )
    with pytest.raises(ModelError, match="boom"):
        await conversation(llm, recorder).answer(TURN, started=recorder.started)
    assert recorder.texts == ["one", " two", ""]
    assert recorder.frames[-1].final
    assert llm.open_streams == 0


async def test_failure_before_the_first_chunk_publishes_nothing_and_raises_for_the_router():
    recorder = Recorder()
    llm = ScriptedLLM(ScriptedResponse(error=ModelError("scripted", "unavailable")))
    with pytest.raises(ModelError, match="unavailable"):
        await conversation(llm, recorder).answer(TURN, started=recorder.started)
    assert recorder.frames == []
    assert ("started",) not in recorder.log
    assert llm.open_streams == 0


async def test_an_empty_answer_is_a_model_failure_that_publishes_nothing():
    recorder = Recorder()
    with pytest.raises(ModelError, match="empty"):
        await conversation(ScriptedLLM(ScriptedResponse(chunks=(" ",))), recorder).answer(
            TURN, started=recorder.started
        )
    assert recorder.frames == []


async def test_cancelled_answer_publishes_no_further_text_and_closes_with_an_empty_final_frame():
    recorder = Recorder()
    llm = ScriptedLLM(ScriptedResponse("first words", hang=True))
    agent = conversation(llm, recorder)
    task = asyncio.create_task(agent.answer(TURN, started=recorder.started))
    await recorder.wait_frames(2)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert recorder.texts == ["first", " words", ""]
    assert recorder.frames[-1].final
    assert llm.open_streams == 0
    assert "record" not in recorder.kinds()


async def test_cancelled_before_the_first_chunk_publishes_nothing():
    recorder = Recorder()
    llm = ScriptedLLM(ScriptedResponse("late", first_chunk_delay_s=30))
    task = asyncio.create_task(conversation(llm, recorder).answer(TURN, started=recorder.started))
    await llm.wait_streaming()
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert recorder.frames == []
    assert llm.open_streams == 0


async def test_cancelled_while_started_is_awaited_publishes_nothing():
    recorder = Recorder()
    gate = asyncio.Event()

    async def slow_started() -> None:
        gate.set()
        await asyncio.Event().wait()

    task = asyncio.create_task(
        conversation(ScriptedLLM("Hello."), recorder).answer(TURN, started=slow_started)
    )
    await gate.wait()
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert recorder.frames == []


async def test_publication_failure_publishes_no_more_frames_and_raises_after_closing_the_model():
    recorder = Recorder(fail_publish_at=2)
    llm = ScriptedLLM("one two three")
    with pytest.raises(PublishFailed):
        await conversation(llm, recorder).answer(TURN, started=recorder.started)
    assert recorder.texts == ["one"]
    assert llm.open_streams == 0
    assert "record" not in recorder.kinds()


# -- context ------------------------------------------------------------------------------


async def test_exchange_is_recorded_only_after_the_final_frame_was_published():
    recorder = Recorder()
    await conversation(ScriptedLLM("At 15:30."), recorder).answer(TURN, started=recorder.started)
    record = recorder.kinds().index("record")
    assert recorder.log[record - 1][2].final
    assert recorder.log[record] == (
        "record",
        "p1",
        TURN.text,
        "At 15:30.",
        TURN.timestamp_us,
        "turn-1",
    )


async def test_failed_answer_records_no_exchange():
    recorder = Recorder()
    llm = ScriptedLLM(
        ScriptedResponse("one two", error=ModelError("scripted", "boom"), error_after_chunks=1)
    )
    with pytest.raises(ModelError):
        await conversation(llm, recorder).answer(TURN, started=recorder.started)
    assert "record" not in recorder.kinds()


async def test_turn_without_timestamp_is_recorded_at_the_current_time():
    recorder = Recorder()
    await conversation(ScriptedLLM("Hi."), recorder).answer(
        AgentTurn("p1", "t9", "Hello?"), started=recorder.started
    )
    assert recorder.log[-1] == ("record", "p1", "Hello?", "Hi.", NOW_US, "t9")


async def test_turn_history_is_reconciled_into_the_context_before_the_prompt_is_built():
    recorder = Recorder()
    history = (
        AgentExchange("What is on the bench?", "A spectrometer.", 10, "t0", "camera"),
        AgentExchange("Hi", "Hello!", 20, "t1", "conversation"),
    )
    turn = AgentTurn("p1", "t2", "Thanks", history=history, timestamp_us=30)
    await conversation(ScriptedLLM("You're welcome."), recorder).answer(
        turn, started=recorder.started
    )
    assert recorder.log[0] == (
        "reconcile",
        "p1",
        [("What is on the bench?", "A spectrometer.", 10), ("Hi", "Hello!", 20)],
        ["t0", "t1"],
    )
    assert recorder.log[1] == ("blocks", "p1")


async def test_release_participant_left_and_close_leave_the_context_untouched():
    recorder = Recorder()
    agent = conversation(ScriptedLLM(), recorder)
    await agent.release("p1")
    await agent.participant_left("p1")
    await agent.close()
    assert recorder.log == []


# -- routing contract ---------------------------------------------------------------------


async def test_admit_accepts_ordinary_turns_without_taking_focus():
    agent = conversation(ScriptedLLM(), Recorder())
    assert await agent.admit(TURN, focused=False) == Admission("accept")
    assert await agent.admit(TURN, focused=True) == Admission("accept")


def test_routing_aid_defaults_to_a_general_conversation_description():
    agent = conversation(ScriptedLLM(), Recorder())
    assert agent.routing_aid("p1") == DEFAULT_ROUTING
    assert "conversation" in DEFAULT_ROUTING.description.lower()
    custom = RoutingAid("Lab helper", priority=2, keywords=("lab",))
    assert conversation(ScriptedLLM(), Recorder(), routing=custom).routing_aid("p1") == custom


async def test_close_stops_new_answers_and_makes_the_conversation_ineligible():
    recorder = Recorder()
    agent = conversation(ScriptedLLM("Hi."), recorder)
    await agent.close()
    with pytest.raises(RuntimeError, match="closed"):
        await agent.answer(TURN, started=recorder.started)
    assert await agent.admit(TURN, focused=False) == Admission("decline")
    assert agent.routing_aid("p1").eligible is False
    assert recorder.frames == []


async def test_close_lets_an_answer_in_flight_finish_and_record():
    recorder = Recorder()
    gate = asyncio.Event()
    llm = ScriptedLLM("Still answering.")
    agent = conversation(llm, recorder)

    async def started() -> None:
        await gate.wait()

    task = asyncio.create_task(agent.answer(TURN, started=started))
    await llm.wait_streaming()
    await agent.close()
    gate.set()
    assert (await task).response == "Still answering."
    assert "record" in recorder.kinds()


@pytest.mark.parametrize(
    ("field", "kwargs"),
    [
        ("llm", {"llm": object()}),
        ("context", {"context": object()}),
        ("system_prompt", {"system_prompt": "  "}),
        ("routing", {"routing": "general"}),
        ("runtime", {"runtime": object()}),
        ("output_topic", {"output_topic": "voice.output"}),
    ],
)
def test_constructor_rejects_invalid_arguments_naming_the_field(field, kwargs):
    recorder = Recorder()
    arguments = {
        "llm": ScriptedLLM(),
        "context": recorder,
        "runtime": recorder,
        "output_topic": VOICE_OUTPUT_TOPIC,
        **kwargs,
    }
    llm = arguments.pop("llm")
    with pytest.raises(ValueError, match=f"Conversation.{field}"):
        Conversation(llm, **arguments)
