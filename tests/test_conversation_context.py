"""Conversation with the real ContextManager behind a router: the shared history of other
destinations joins the conversation's context once, never replayed; the conversation's own
exchanges are recorded once; clearing forgets a participant."""

from __future__ import annotations

from xrmq.actors.context import ContextManager
from xrmq.actors.conversation import Conversation
from xrmq.actors.models import ScriptedLLM
from xrmq.actors.routing import AgentRouter
from xrmq.actors.runtime import AgentRuntime
from xrmq.schemas import AgentTurn, DestinationResult
from xrmq.topics import VOICE_OUTPUT_TOPIC

from router_doubles import Decisions, Destination, Log, router_output

BASE_US = 1_714_574_587_000_000


def turn(turn_id: str, text: str, index: int, participant: str = "p1") -> AgentTurn:
    return AgentTurn(participant, turn_id, text, timestamp_us=BASE_US + index * 1_000_000)


async def test_router_history_is_reconciled_into_the_context_without_replay():
    log = Log()
    llm = ScriptedLLM("Lunch is at noon.", "It is a spectrometer, as I said.", "Noted.")
    camera = Destination("camera", log, answers=[DestinationResult("A spectrometer.")])
    context = ContextManager(llm)
    async with AgentRuntime() as runtime:
        conversation = Conversation(
            llm, context=context, runtime=runtime, output_topic=VOICE_OUTPUT_TOPIC
        )
        router = AgentRouter(
            {"conversation": conversation, "camera": camera},
            Decisions(log, "conversation", "camera", "conversation", "conversation"),
            output=router_output(log),
            history_limit=2,
        )
        await router.handle(turn("t1", "When is lunch?", 1))
        await router.handle(turn("t2", "What is on the bench?", 2))
        await router.handle(turn("t3", "What was on the bench?", 3))
        await router.handle(turn("t4", "Thanks.", 4))
        await router.stop()
    await conversation.close()
    await context.close()
    third, fourth = (request.messages[1].content for request in llm.requests[1:])
    assert third.count("User: When is lunch?") == 1
    assert third.count("User: What is on the bench?\nAssistant: A spectrometer.") == 1
    for exchange in (
        "User: When is lunch?",
        "User: What is on the bench?",
        "User: What was on the bench?",
    ):
        assert fourth.count(exchange) == 1
    assert (
        fourth.index("When is lunch?")
        < fourth.index("What is on the bench?")
        < fourth.index("What was on the bench?")
    )


async def test_clearing_a_participant_after_the_router_departure_forgets_their_context_only():
    log = Log()
    llm = ScriptedLLM("Noted, p1.", "Noted, p2.", "Fresh start.")
    context = ContextManager(llm, incremental_context_topics=("sample.notes",))
    runtime = AgentRuntime()
    runtime.register("context", context.subscriber())
    async with runtime:
        conversation = Conversation(
            llm, context=context, runtime=runtime, output_topic=VOICE_OUTPUT_TOPIC
        )
        router = AgentRouter(
            {"conversation": conversation},
            Decisions(log, *["conversation"] * 3),
            output=router_output(log),
        )
        await router.handle(turn("t1", "My badge is 4471.", 1, "p1"))
        await router.handle(turn("t2", "My badge is 9000.", 2, "p2"))
        await router.participant_left("p1")
        await context.clear("p1")
        await router.handle(turn("t3", "What is my badge?", 3, "p1"))
        await router.stop()
        assert any("9000" in block.text for block in context.blocks("p2"))
        await conversation.close()
        await context.close()
    assert "4471" not in llm.requests[2].messages[1].content
