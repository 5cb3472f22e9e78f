"""A participant who leaves is forgotten by the realtime destination: their session is
closed, the checkpoint being summarized is cancelled (nothing of theirs is summarized after
they left), and the session's checkpoints and transcript are dropped (issue 29 item 1).
Skipped without the realtime extra (websockets, numpy)."""

from __future__ import annotations

import asyncio

import pytest

pytest.importorskip("websockets", reason="the realtime extra: pip install 'xrmq[realtime]'")
pytest.importorskip("numpy", reason="the realtime extra: pip install 'xrmq[realtime]'")

from realtime_helpers import WAIT_S, ScriptedEars

from xrmq.actors.context import ContextManager
from xrmq.actors.models import ChatMessage, OfflineLLM
from xrmq.actors.realtime.conversation import RealtimeConversation
from xrmq.actors.realtime.openai_realtime import OpenAIRealtime
from xrmq.actors.realtime.pressure import RealtimeLimits
from xrmq.actors.realtime.server import OfflineRealtimeServer, ServerSettings
from xrmq.actors.realtime.session import SessionSettings
from xrmq.actors.runtime import AgentRuntime
from xrmq.schemas import AgentTurn
from xrmq.topics import VOICE_OUTPUT_TOPIC

LIMIT = 400
FACTS = [
    "My badge number is 4417.",
    "I parked on level 3.",
    "My sister lives in Lyon.",
    "The router password is on the fridge.",
    "My dentist is Dr. Okafor.",
    "The printer is in room 12.",
    "My flight leaves at nine.",
    "The plant needs water on Fridays.",
]


class GatedSummarizer:
    """Summarizes the first checkpoint at once; holds every later one until cancelled."""

    def __init__(self) -> None:
        self.calls = 0
        self.holding = asyncio.Event()
        self.cancelling = asyncio.Event()
        self.cancelled = 0

    async def __call__(self, head: tuple[ChatMessage, ...], previous: str | None) -> str:
        self.calls += 1
        if self.calls == 1:
            return "The participant's badge number is 4417."
        self.holding.set()
        try:
            await asyncio.Event().wait()
        except asyncio.CancelledError:
            self.cancelled += 1
            self.cancelling.set()
            raise
        raise AssertionError("unreachable: the event is never set")


async def _noop() -> None:
    return None


@pytest.mark.timeout(90)
async def test_a_participant_left_forgets_the_realtime_session_and_its_checkpoints() -> None:
    summarizer = GatedSummarizer()
    context = ContextManager(OfflineLLM(time_to_first_token_s=0, tokens_per_second=0))
    runtime = AgentRuntime()
    async with OfflineRealtimeServer(
        ServerSettings(max_context_tokens=LIMIT), brain=ScriptedEars()
    ) as server:
        realtime = RealtimeConversation(
            OpenAIRealtime(
                base_url=server.url,
                limits=RealtimeLimits(max_context_tokens=LIMIT),
                silence_ms=300,
            ),
            context=context,
            runtime=runtime,
            output_topic=VOICE_OUTPUT_TOPIC,
            summarize=summarizer,
            settings=SessionSettings(keep_tail=2),
        )
        runtime.register("realtime", realtime)
        async with runtime:
            for index, text in enumerate(FACTS * 3):
                turn = AgentTurn("p1", f"turn-{index}", text, timestamp_us=1_700_000_000 + index)
                async with asyncio.timeout(WAIT_S):
                    await realtime.answer(turn, started=_noop)
                    settled = asyncio.ensure_future(realtime.settled("p1"))
                    holding = asyncio.ensure_future(summarizer.holding.wait())
                    await asyncio.wait([settled, holding], return_when=asyncio.FIRST_COMPLETED)
                    settled.cancel()
                    holding.cancel()
                if summarizer.holding.is_set():
                    break
            assert summarizer.holding.is_set(), "no second checkpoint was started"
            session = realtime.participants["p1"].session
            assert session.checkpointer.latest is not None  # the first checkpoint committed

            async with asyncio.timeout(WAIT_S):  # heard twice: participant.left and the router
                first = asyncio.ensure_future(realtime.participant_left("p1"))
                await summarizer.cancelling.wait()  # the first is forgetting the session
                await realtime.participant_left("p1")  # returns once that forget is done too

            assert "p1" not in realtime.participants
            assert summarizer.cancelled == 1  # the checkpoint in flight was cancelled
            assert session.checkpointer.latest is None  # its checkpoints are gone
            assert session.transcript.messages == ()
            assert session.machine.phase.name == "CLOSED"
            await first
            await realtime.close()
    await context.close()


def test_a_barge_in_after_forget_cannot_cut_the_new_transcript() -> None:
    """Message ids restart at 1 in the new transcript: a cut of a response finished before
    the participant was forgotten must not land on the new transcript's message."""
    from xrmq.actors.realtime.checkpoint import LiveTranscript
    from xrmq.actors.realtime.provider import ResponseDone
    from xrmq.actors.realtime.turns import TurnRecorder

    turns = TurnRecorder(LiveTranscript(), sample_rate=1000)
    turns.text_sent("My badge number is 4417.")
    turns.response_started("resp_1")
    turns.output_item("resp_1", "item_1")
    turns.audio("resp_1", 2000)  # one second of audio
    turns.response_done(ResponseDone("resp_1", "completed", "Noted, 4417.", None), epoch=1)
    fresh = LiveTranscript()
    turns.forget(fresh)
    turns.text_sent("Hello again.")
    turns.response_started("resp_2")
    turns.response_done(ResponseDone("resp_2", "completed", "Hello, who are you?", None), 2)
    cut = turns.cut("resp_1", 0)
    turns.heard(cut)
    assert cut.item_id is None and cut.spoken is None
    assert [message.text for message in fresh.messages] == ["Hello again.", "Hello, who are you?"]
