"""The SDK's "Compose a conversation" example (docs/context.md), runnable: only its imports
are changed.

python examples/seed_example.py

The body of seed_example() is the SDK's text as is. The three names it takes from
outside are supplied above it: the model (ScriptedLLM, no network), the router's
decision service, and where router-owned text goes.
"""

import asyncio

# -- the SDK's imports, changed to xrmq ---------------------------------------------------
from xrmq.actors.context import ContextManager
from xrmq.actors.conversation import Conversation
from xrmq.actors.models import ScriptedLLM
from xrmq.actors.routing import AgentRouter, SingleDestination
from xrmq.actors.runtime import AgentRuntime
from xrmq.schemas import AgentTurn
from xrmq.topics import VOICE_OUTPUT_TOPIC

# -- what the example takes from its application ---------------------------------------------
llm = ScriptedLLM("The calibration meeting is at 15:30 in lab 2.")
decisions = SingleDestination()


async def publish_router_control(turn: AgentTurn, route: str | None, text: str) -> None:
    print(f"router says to {turn.participant_id}: {text}")


async def seed_example():
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
    return result


result = asyncio.run(seed_example())
print(f"{result.status} by {result.route}: {result.response}")
