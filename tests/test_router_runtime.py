"""AgentRouter as an actor on the embedded runtime: queries, router text, interruption,
lifecycle."""

from __future__ import annotations

import asyncio

import pytest

from xrmq.actors.conversation import Conversation
from xrmq.actors.models import ScriptedLLM, ScriptedResponse
from xrmq.actors.routing import AgentRouter, SingleDestination
from xrmq.actors.runtime import Agent, AgentRuntime, RuntimeContext
from xrmq.schemas import (
    Admission,
    ForgetFailure,
    Interrupted,
    ParticipantForgotten,
    ParticipantJoined,
    ParticipantLeft,
    UserQuery,
)
from xrmq.topics import (
    INTERRUPTED_TOPIC,
    PARTICIPANT_FORGOTTEN_TOPIC,
    PARTICIPANT_JOINED_TOPIC,
    PARTICIPANT_LEFT_TOPIC,
    QUERY_TOPIC,
    VOICE_OUTPUT_TOPIC,
)

from router_doubles import Decisions, Destination, FakeContext, Log, OutputRecorder


def runtime_router(runtime: AgentRuntime, agents: dict, **kwargs) -> AgentRouter:
    router = AgentRouter(
        agents,
        SingleDestination(),
        query_topic=QUERY_TOPIC,
        output_topic=VOICE_OUTPUT_TOPIC,
        interrupted_topic=INTERRUPTED_TOPIC,
        **kwargs,
    )
    runtime.register("router", router)
    return router


class Acknowledging:
    """A conversation that acknowledges every turn before answering."""

    def __init__(self, conversation: Conversation) -> None:
        self.conversation = conversation

    def __getattr__(self, name):
        return getattr(self.conversation, name)

    async def admit(self, turn, *, focused):
        return Admission("accept", text="Let me check.")


async def test_a_query_is_answered_as_a_reply_to_its_message_id_after_the_router_acknowledgement():
    runtime = AgentRuntime()
    recorder = runtime.register("recorder", OutputRecorder())
    context = FakeContext()
    conversation = Conversation(
        ScriptedLLM("At 15:30 in room B."),
        context=context,
        runtime=runtime,
        output_topic=VOICE_OUTPUT_TOPIC,
    )
    runtime_router(runtime, {"conversation": Acknowledging(conversation)})
    async with runtime:
        query_id = runtime.send(
            QUERY_TOPIC, UserQuery("When is the calibration meeting?", 123), participant_id="p1"
        )
        await recorder.wait_for(lambda frames: recorder.finals() == 2)
    sources = [(source, frame.text, frame.final) for _, source, frame in recorder.frames]
    assert sources == [
        ("router", "Let me check.", False),
        ("router", "", True),
        ("conversation", "At", False),
        ("conversation", " 15:30", False),
        ("conversation", " in", False),
        ("conversation", " room", False),
        ("conversation", " B.", False),
        ("conversation", "", True),
    ]
    assert {frame.request_id for _, _, frame in recorder.frames} == {query_id}
    assert {frame.timestamp_us for _, _, frame in recorder.frames} == {123}
    assert context.log == [("record", "p1", query_id)]


async def test_an_interruption_cuts_the_answer_and_the_next_query_is_answered():
    runtime = AgentRuntime()
    recorder = runtime.register("recorder", OutputRecorder())
    llm = ScriptedLLM(ScriptedResponse("Well, the long answer", hang=True), "Short answer.")
    context = FakeContext()
    conversation = Conversation(
        llm, context=context, runtime=runtime, output_topic=VOICE_OUTPUT_TOPIC
    )
    runtime_router(runtime, {"conversation": conversation})
    async with runtime:
        runtime.send(QUERY_TOPIC, UserQuery("Tell me everything.", 1), participant_id="p1")
        await recorder.wait_for(lambda frames: len(frames) == 4)
        await runtime.publish(INTERRUPTED_TOPIC, Interrupted(), participant_id="p1")
        await recorder.wait_for(lambda frames: recorder.finals() == 1)
        second = runtime.send(QUERY_TOPIC, UserQuery("And briefly?", 2), participant_id="p1")
        await recorder.wait_for(lambda frames: recorder.finals() == 2)
    first_reply = [frame for _, _, frame in recorder.frames[:5]]
    assert [frame.text for frame in first_reply] == ["Well,", " the", " long", " answer", ""]
    assert [frame.text for _, _, frame in recorder.frames[5:]] == ["Short", " answer.", ""]
    assert recorder.frames[5][2].request_id == second
    assert [entry[2] for entry in context.log] == [second]  # the cut answer recorded nothing
    assert llm.open_streams == 0


async def test_participant_left_runs_cleanup_after_the_answer_drained():
    log = Log()
    chat = Destination("chat", log, answers=["hang"])
    left = asyncio.Event()

    async def cleanup(participant_id: str) -> None:
        log.append(("cleanup", participant_id))
        left.set()

    runtime = AgentRuntime()
    runtime_router(runtime, {"chat": chat}, cleanup_participant=cleanup)
    async with runtime:
        runtime.send(QUERY_TOPIC, UserQuery("Hello", 1), participant_id="p1")
        await chat.answering.wait()
        await runtime.publish(PARTICIPANT_LEFT_TOPIC, ParticipantLeft(), participant_id="p1")
        await left.wait()
    drained = log.index(next(entry for entry in log if entry[0] == "drained"))
    assert drained < log.index(("left", "chat", "p1")) < log.index(("cleanup", "p1"))


async def test_a_join_for_a_participant_with_router_state_starts_them_afresh():
    log = Log()
    chat = Destination("chat", log, admissions=[Admission("accept", focus=True)])
    cleaned = asyncio.Event()

    async def cleanup(participant_id: str) -> None:
        log.append(("cleanup", participant_id))
        cleaned.set()

    runtime = AgentRuntime()
    recorder = runtime.register("recorder", OutputRecorder())
    runtime_router(runtime, {"chat": chat}, cleanup_participant=cleanup)
    async with runtime:
        runtime.send(QUERY_TOPIC, UserQuery("Hello", 1), participant_id="p1")
        await chat.answered.wait()
        chat.answered.clear()
        await runtime.publish(PARTICIPANT_JOINED_TOPIC, ParticipantJoined(), participant_id="p1")
        await cleaned.wait()
        await runtime.publish(PARTICIPANT_JOINED_TOPIC, ParticipantJoined(), participant_id="p2")
        runtime.send(QUERY_TOPIC, UserQuery("Hello again", 2), participant_id="p1")
        await chat.answered.wait()
    assert log.of("cleanup") == [("cleanup", "p1")]  # p2 had no state: nothing to clean
    assert log.of("admit")[-1][3] is False  # focus did not survive the new session
    assert recorder.frames == []


class ForgottenRecorder(Agent):
    """Logs every ``ParticipantForgotten`` the router publishes."""

    def __init__(self, log: Log) -> None:
        self.log = log
        self.heard = asyncio.Event()

    def handlers(self):
        return {PARTICIPANT_FORGOTTEN_TOPIC: self.on_forgotten}

    async def on_forgotten(self, message: ParticipantForgotten, ctx: RuntimeContext) -> None:
        self.log.append(("forgotten", ctx.participant_id, message.request_id, message.failed))
        self.heard.set()


class SlowToForget(Destination):
    """Forgets a participant only once ``forget`` is set; ``asked`` is set when it is asked."""

    def __init__(self, name: str, log: Log) -> None:
        super().__init__(name, log)
        self.asked = asyncio.Event()
        self.forget = asyncio.Event()

    async def participant_left(self, participant_id: str) -> None:
        self.asked.set()
        await self.forget.wait()
        await super().participant_left(participant_id)


class CannotForget(Destination):
    async def participant_left(self, participant_id: str) -> None:
        raise TimeoutError("the transcript store did not answer within 2s")


@pytest.mark.timeout(20)
async def test_a_participant_left_is_confirmed_once_every_destination_forgot_and_history_is_gone():
    log = Log()
    chat = Destination("chat", log)
    slow = SlowToForget("notes", log)
    broken = CannotForget("tools", log)
    runtime = AgentRuntime()
    forgotten = runtime.register("forgotten", ForgottenRecorder(log))
    router = AgentRouter(
        {"chat": chat, "notes": slow, "tools": broken},
        Decisions(log),
        default="chat",
        query_topic=QUERY_TOPIC,
        output_topic=VOICE_OUTPUT_TOPIC,
    )
    runtime.register("router", router)
    async with runtime:
        for text in ("The freezer in room 210 is at minus 80.", "What is the freezer at?"):
            runtime.send(QUERY_TOPIC, UserQuery(text, 1), participant_id="p1")
            await chat.answered.wait()
            chat.answered.clear()
        first = log.of("answer")[0][2]
        assert log.of("answer")[1][3] == (first,)  # the history the router passes on

        left = runtime.send(PARTICIPANT_LEFT_TOPIC, ParticipantLeft(), participant_id="p1")
        await slow.asked.wait()
        assert not forgotten.heard.is_set()  # not before every destination forgot
        slow.forget.set()
        await asyncio.wait_for(forgotten.heard.wait(), 5)
        assert router.gauges()["router.participants"] == 0

        third = runtime.send(
            QUERY_TOPIC, UserQuery("What is the freezer at?", 2), participant_id="p1"
        )
        await chat.answered.wait()
    assert log.of("answer")[2][2:4] == (third, ())  # no history survived the departure
    assert log.of("forgotten") == [
        (
            "forgotten",
            "p1",
            left,
            (
                ForgetFailure(
                    "tools", "TimeoutError: the transcript store did not answer within 2s"
                ),
            ),
        )
    ]
    assert log.index(("left", "notes", "p1")) < log.index(log.of("forgotten")[0])
