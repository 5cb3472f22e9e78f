"""The SDK's "Compose a conversation" example (docs/context.md), with only its imports changed, on the
embedded runtime with ScriptedLLM.

The example's body below is verbatim. The names it takes from outside (``llm``,
``decisions``, ``publish_router_control``) are supplied here, and ``AgentRuntime`` is
the xrmq runtime with an observer registered on the voice output topic: its ``stop``
first lets the observer catch up with everything the runtime published (a marker it
publishes last comes back after every earlier frame), so the test sees every frame.
"""

from __future__ import annotations

import asyncio

from xrmq.actors import runtime as xrmq_runtime

# -- the SDK's imports, changed to xrmq ---------------------------------------------------
from xrmq.actors.context import ContextManager
from xrmq.actors.conversation import Conversation
from xrmq.actors.models import ScriptedLLM
from xrmq.actors.routing import AgentRouter, SingleDestination
from xrmq.schemas import AgentTurn, ResponseOutput
from xrmq.topics import VOICE_OUTPUT_TOPIC

from router_doubles import OutputRecorder

BARRIER = "__observer_barrier__"


class AgentRuntime(xrmq_runtime.AgentRuntime):
    """The xrmq runtime, observed: every frame on the voice output topic is recorded."""

    instances: list[AgentRuntime] = []

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.observer = self.register("observer", OutputRecorder())
        AgentRuntime.instances.append(self)

    async def stop(self) -> None:
        if self.running:
            await self.publish(
                VOICE_OUTPUT_TOPIC, ResponseOutput("update", "barrier"), participant_id=BARRIER
            )
            await self.observer.wait_for(lambda frames: any(pid == BARRIER for pid, _, _ in frames))
        await super().stop()


router_text: list[tuple[str, str | None, str]] = []


async def publish_router_control(turn: AgentTurn, route: str | None, text: str) -> None:
    router_text.append((turn.turn_id, route, text))


async def seed_example(llm, decisions) -> None:
    # ---- the SDK's example, verbatim from here -----------------------------------------------
    # fmt: off
    runtime = AgentRuntime()

    context = ContextManager(llm)
    conversation = Conversation(
        llm,
        context=context,
        instructions="Answer general questions about the lab.",
        runtime=runtime,
        output_topic=VOICE_OUTPUT_TOPIC,
    )
    front_end = AgentRouter({"conversation": conversation}, decisions, output=publish_router_control)

    async def participant_left(participant_id: str) -> None:
        await front_end.participant_left(participant_id)
        await context.clear(participant_id)

    async with runtime:
        try:
            result = await front_end.handle(
                AgentTurn("participant-1", "turn-1", "When is the calibration meeting?"),
            )
        finally:
            await front_end.stop()
    await conversation.close()
    await context.close()
    # fmt: on
    # ---- end of the SDK's example ---------------------------------------------------------
    assert result.status == "answered"


async def test_seed_example_runs_and_publishes_the_expected_reply_frames():
    llm = ScriptedLLM("The calibration meeting is at 15:30.")
    await asyncio.wait_for(seed_example(llm, SingleDestination()), 30)
    frames = [
        (pid, source, frame)
        for pid, source, frame in AgentRuntime.instances[-1].observer.frames
        if pid != BARRIER
    ]
    response_id = frames[0][2].response_id
    expected_texts = ["The", " calibration", " meeting", " is", " at", " 15:30.", ""]
    assert frames == [
        (
            "participant-1",
            "conversation",
            ResponseOutput("reply", text, "turn-1", response_id=response_id, final=(text == "")),
        )
        for text in expected_texts
    ]
    assert router_text == []
    system, context, request = llm.requests[0].messages
    assert system.content.endswith("\n\nAnswer general questions about the lab.")
    assert context.content.startswith("Current time: ")
    assert request.content == "When is the calibration meeting?"
