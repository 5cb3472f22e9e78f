"""``ToolAgent.take_back`` takes each taken-back turn's exchange back from the shared
context by the turn's id, which the transcript keeps per turn: through its store and
journal, so an agent and a context process started again still know them; a transcript
journaled before turns had ids takes its questions back without retracting anything."""

from __future__ import annotations

import pytest
from test_transcript_journal_format import write_version_3_journal
from tools_doubles import Probe, never_started, probe_reading, session_model, turn

from xrmq.actors.context.store import open_store
from xrmq.actors.runtime import AgentRuntime
from xrmq.actors.tools.policy import AutoCompactor
from xrmq.actors.tools.store import register_transcripts
from xrmq.actors.tools.tool import Tool
from xrmq.actors.tools.tool_agent import ToolAgent
from xrmq.topics import VOICE_OUTPUT_TOPIC

from router_doubles import FakeContext

pytestmark = pytest.mark.timeout(60)


def agent(runtime: AgentRuntime, context: FakeContext) -> ToolAgent:
    return ToolAgent(
        session_model(),
        context=context,
        runtime=runtime,
        output_topic=VOICE_OUTPUT_TOPIC,
        tools=[Tool("probe", "Read a probe.", Probe, probe_reading)],
        transcripts="lab-tools",
        compactor=AutoCompactor(enabled=False),
    )


async def test_take_back_retracts_each_turns_exchange_after_the_agent_and_store_restart(tmp_path):
    path = tmp_path / "context-0.sqlite3"
    store = open_store(path)
    front = AgentRuntime(name="front")
    back = AgentRuntime(front.address, name="back")
    register_transcripts(back, "lab-tools", store=store)
    async with front, back:
        first = agent(front, FakeContext())
        await first.answer(turn("t1", "Read probe 1."), started=never_started)
        await first.answer(turn("t2", "Read probe 2."), started=never_started)
        await first.mirrored()
    store.close()

    store = open_store(path)  # a new context process on the same journal
    context = FakeContext()
    front = AgentRuntime(name="front-again")
    back = AgentRuntime(front.address, name="back-again")
    register_transcripts(back, "lab-tools", store=store)
    async with front, back:
        again = agent(front, context)  # a new agent: loads the transcript from the store
        second = await again.take_back("p1")
        first_turn = await again.take_back("p1")
        nothing = await again.take_back("p1")
    store.close()
    assert second[0]["content"] == "Read probe 2." and first_turn[0]["content"] == "Read probe 1."
    assert nothing == []
    assert context.log.of("retract") == [("retract", "p1", "t2"), ("retract", "p1", "t1")]


async def test_a_transcript_journaled_without_turn_ids_takes_back_without_retracting(tmp_path):
    path = tmp_path / "context-0.sqlite3"
    write_version_3_journal(path)
    store = open_store(path)
    context = FakeContext()
    front = AgentRuntime(name="front")
    back = AgentRuntime(front.address, name="back")
    register_transcripts(back, "lab-tools", store=store)
    async with front, back:
        old = agent(front, context)
        await old.answer(turn("t2", "Read probe 2."), started=never_started)
        newest = await old.take_back("p1")
        journaled = await old.take_back("p1")
    store.close()
    assert newest[0]["content"] == "Read probe 2." and journaled[0]["content"] == "Read probe 1."
    assert context.log.of("retract") == [("retract", "p1", "t2")]  # none for the old turn
