"""The tools transcript journaled by issue 15's context store: a ``TranscriptActor``
journals every applied write (messages, placeholders, reclaimed originals, summary,
docs/tools.md's counters, revision) before acknowledging it, and a restarted one starts
from the journal; an agent whose write the store missed sends the whole transcript.
The last test kills the context process of a real edge stack with SIGKILL."""

from __future__ import annotations

import asyncio
import sqlite3
import sys

import pytest
from tools_doubles import Probe, never_started, probe_reading, session_model, turn

from xrmq.actors.context.store import SCHEMA_VERSION, open_store
from xrmq.actors.runtime import AgentRuntime
from xrmq.actors.tools.policy import AutoCompactor
from xrmq.actors.tools.store import (
    TranscriptLoad,
    TranscriptState,
    TranscriptTopics,
    held_messages,
    register_transcripts,
    restore,
)
from xrmq.actors.tools.tiers import placeholder
from xrmq.actors.tools.tool import Tool
from xrmq.actors.tools.tool_agent import ToolAgent
from xrmq.topics import VOICE_OUTPUT_TOPIC

from router_doubles import FakeContext

PROBE = Tool("probe", "Read a probe.", Probe, probe_reading)
TOPICS = TranscriptTopics.of("lab-tools")


def agent_on(runtime: AgentRuntime, **kwargs) -> ToolAgent:
    options = {"compactor": AutoCompactor(enabled=False), "discovery_timeout_s": 2.0, **kwargs}
    return ToolAgent(
        session_model(),
        context=FakeContext(),
        runtime=runtime,
        output_topic=VOICE_OUTPUT_TOPIC,
        tools=[PROBE],
        transcripts="lab-tools",
        **options,
    )


async def load(runtime: AgentRuntime, participant: str = "p1") -> TranscriptState:
    return await runtime.ask(
        TOPICS.load,
        TranscriptLoad(),
        reply_type=TranscriptState,
        participant_id=participant,
        timeout=10,
    )


async def test_a_journaled_transcript_comes_back_whole_with_its_originals_and_counters(tmp_path):
    path = tmp_path / "context-0.sqlite3"
    front = AgentRuntime(name="front")
    back = AgentRuntime(front.address, name="back")
    store = open_store(path)
    register_transcripts(back, "lab-tools", store=store)
    async with front, back:
        agent = agent_on(front)
        for index in range(1, 15):
            await agent.answer(turn(f"t{index}", f"Read probe {index}."), started=never_started)
        reclaimed = await agent.compact("p1", tier="toolcall")
        await agent.answer(turn("t15", "Read probe 15."), started=never_started)
        await agent.mirrored()
        before = await load(front)
    store.close()
    held = agent.transcript("p1")
    assert reclaimed.reclaimed_count == 2 and before.revision == held.revision == 16
    assert held_messages(before.messages) == held.messages

    reopened = open_store(path)
    assert set(reopened.transcripts) == {("p1", "lab-tools")}
    front = AgentRuntime(name="front-2")
    back = AgentRuntime(front.address, name="back-2")
    register_transcripts(back, "lab-tools", store=reopened)
    async with front, back:
        after = await load(front)
        second = agent_on(front)
        answer = await second.answer(
            turn("t16", "What is the calibration code of probe 1?"), started=never_started
        )
        await second.mirrored()
        continued = await load(front)
    reopened.close()
    assert after == before
    restored = restore(after)
    assert restored.messages[2]["content"] == placeholder("r1")
    assert restored.extract("r1") == probe_reading(Probe(1))  # the original, from the journal
    assert (restored.counters.tool_rounds, restored.counters.toolcall_reclaimed) == (1, 2)
    assert answer.response == "Probe 1 code is nominal-1."  # extract_compacted_tool_result
    assert len(continued.messages) == len(before.messages) + 4 and continued.revision == 17


async def test_a_store_that_missed_writes_gets_the_whole_transcript_and_journals_it(tmp_path):
    path = tmp_path / "context-0.sqlite3"
    front = AgentRuntime(name="front")
    async with front:
        agent = agent_on(front, discovery_timeout_s=0.3)
        back = AgentRuntime(front.address, name="back")
        store = open_store(path)
        register_transcripts(back, "lab-tools", store=store)
        async with back:
            await agent.answer(turn("t1", "Read probe 1."), started=never_started)
            await agent.mirrored()
        store.close()
        # The store is down: this turn's write goes unanswered.
        await agent.answer(turn("t2", "Read probe 2."), started=never_started)
        back = AgentRuntime(front.address, name="back-2")
        store = open_store(path)
        register_transcripts(back, "lab-tools", store=store)
        async with back:
            await agent.mirrored()  # retried as a replace once the store answers again
            stored = await load(front)
        store.close()
    held = agent.transcript("p1")
    assert agent.store_refused >= 1 and not held.resync
    assert held_messages(stored.messages) == held.messages and len(held.messages) == 8
    journal = open_store(path)
    try:
        assert len(journal.transcripts["p1", "lab-tools"].messages) == 8
    finally:
        journal.close()


async def test_a_refused_append_is_followed_by_a_replace(tmp_path):
    """A store restarted without the journal has revision 0: the append of revision 2 is
    refused, and the agent's resync brings it the whole transcript."""
    front = AgentRuntime(name="front")
    async with front:
        agent = agent_on(front)
        back = AgentRuntime(front.address, name="back")
        register_transcripts(back, "lab-tools")
        async with back:
            await agent.answer(turn("t1", "Read probe 1."), started=never_started)
            await agent.mirrored()
        back = AgentRuntime(front.address, name="back-2")
        register_transcripts(back, "lab-tools")  # no journal: it starts empty
        async with back:
            await agent.answer(turn("t2", "Read probe 2."), started=never_started)
            await agent.mirrored()
            stored = await load(front)
    assert agent.store_refused == 1
    assert (
        held_messages(stored.messages) == agent.transcript("p1").messages and stored.revision == 3
    )


async def test_a_participant_leaving_removes_their_transcript_rows(tmp_path):
    path = tmp_path / "context-0.sqlite3"
    front = AgentRuntime(name="front")
    back = AgentRuntime(front.address, name="back")
    store = open_store(path)
    register_transcripts(back, "lab-tools", store=store)
    async with front, back:
        agent = agent_on(front)
        await agent.answer(turn("t1", "Read probe 1."), started=never_started)
        await agent.answer(turn("t1", "Read probe 1.", participant="p2"), started=never_started)
        await agent.participant_left("p1")
        await agent.mirrored()
    store.close()
    journal = open_store(path)
    try:
        assert set(journal.transcripts) == {("p2", "lab-tools")}
    finally:
        journal.close()


async def test_participant_left_returns_once_the_store_forgot_the_transcript_and_its_originals(
    tmp_path,
):
    front = AgentRuntime(name="front")
    back = AgentRuntime(front.address, name="back")
    store = open_store(tmp_path / "context-0.sqlite3")
    register_transcripts(back, "lab-tools", store=store)
    async with front, back:
        agent = agent_on(front)
        for index in range(1, 15):
            await agent.answer(turn(f"t{index}", f"Read probe {index}."), started=never_started)
        reclaimed = await agent.compact("p1", tier="toolcall")
        await agent.mirrored()
        journaled = store.read_transcript("p1", "lab-tools")
        assert reclaimed.reclaimed_count == 2
        assert journaled is not None and len(journaled.originals) == 2

        await agent.participant_left("p1")  # no mirrored(): returning means it is forgotten
        assert store.read_transcript("p1", "lab-tools") is None
        assert await load(front) == TranscriptState()
    store.close()


async def test_participant_left_fails_naming_the_store_that_did_not_forget(tmp_path):
    front = AgentRuntime(name="front")
    async with front:
        agent = agent_on(front, discovery_timeout_s=0.3)  # no store serves lab-tools
        agent.transcript("p1")
        with pytest.raises(TimeoutError, match="transcript store 'lab-tools' did not forget p1"):
            await agent.participant_left("p1")
        assert agent.transcript("p1").revision == 0  # this process forgot it all the same


def test_a_version_1_journal_gains_the_transcript_tables(tmp_path):
    path = tmp_path / "context.sqlite3"
    open_store(path).close()
    db = sqlite3.connect(path)
    for table in ("transcripts", "transcript_messages", "transcript_originals"):
        db.execute(f"DROP TABLE {table}")
    db.execute("PRAGMA user_version = 1")
    db.commit()
    db.close()
    opened = open_store(path)
    try:
        assert opened._db.execute("PRAGMA user_version").fetchone()[0] == SCHEMA_VERSION == 4
        assert opened.transcripts == {}
    finally:
        opened.close()


def tools_stack_config():
    import msgspec

    from xrmq.actors.edge.config import DestinationConfig, ProcessConfig, RestartPolicyConfig
    from xrmq.actors.edge.config_loader import default_config
    from xrmq.actors.models import parse_model_spec

    base = default_config()
    # Unpaced answers: the test is about the journal, and 15 paced tool turns cost ~45 s.
    unpaced = parse_model_spec(
        {"preset": "offline", "time_to_first_token_s": 0, "tokens_per_second": 0}
    )
    models = msgspec.structs.replace(base.models, answers=unpaced)
    restart = RestartPolicyConfig(max_crashes=3, backoff_initial_s=0.05, backoff_max_s=0.2)
    supervisor = msgspec.structs.replace(base.supervisor, restart=restart, shutdown_timeout_s=5.0)
    tools = DestinationConfig(
        description="Lab tools: looks at the bench through the camera.",
        kind="tools",
        keywords=["bench", "camera"],
        tool_servers=["camera"],
        tool_timeout_s=5.0,
    )
    processes = dict(base.processes)
    processes["camera"] = ProcessConfig(roles=["edge_roles:lab_camera"])
    processes["conversation"] = msgspec.structs.replace(
        processes["conversation"], after=["context", "camera"]
    )
    return msgspec.structs.replace(
        base,
        supervisor=supervisor,
        models=models,
        processes=processes,
        destinations={**base.destinations, "lab-tools": tools},
        router=msgspec.structs.replace(base.router, decisions="rules"),
    )


@pytest.mark.timeout(240)
async def test_a_kill_9_of_the_context_process_keeps_the_transcript_placeholders_and_originals(
    monkeypatch,
):
    """14 tool turns, a manual tier-1 compaction (``xrmq context compact --tier``'s
    ask), SIGKILL of the context process: the restarted process serves the same
    transcript from its journal; then SIGKILL of the conversation process: the new
    ToolAgent continues from it."""
    from xrmq.actors.edge.private_stack import PrivateStack
    from xrmq.actors.edge.replies import ReplyCollector, ask
    from xrmq.actors.edge.tool_compaction import compact

    from buses import PROCS

    monkeypatch.setenv("PYTHONPATH", str(PROCS))  # the camera process's role: edge_roles
    monkeypatch.syspath_prepend(str(PROCS))  # the supervisor here checks it too
    async with PrivateStack(tools_stack_config()) as stack:
        collector = ReplyCollector()
        client = AgentRuntime(stack.bus, name="test-client")
        client.register("replies", collector)
        async with client, asyncio.timeout(200):
            for index in range(14):
                bench = ask(client, collector, "p1", f"What is on the bench? ({index})")
                await bench.wait(30)
                assert "red multimeter" in bench.answer, bench.answer
            done = await compact(client, "p1", "/compact toolcall lab-tools", None, timeout=20)
            assert "2 reclaimed" in done, done
            before = await load(client)  # answered after the compaction's write: journaled
            restored = restore(before)
            call_ids = [
                m["tool_call_id"] for m in held_messages(before.messages) if m["role"] == "tool"
            ]
            assert len(call_ids) == 14 and restored.counters.toolcall_reclaimed == 2
            assert held_messages(before.messages)[2]["content"] == placeholder(call_ids[0] or "")
            assert restored.extract(call_ids[0] or "").startswith("View 1: a red multimeter")

            await stack.kill("context")
            after = await load(client)
            assert after == before

            await stack.kill("conversation")
            again = ask(client, collector, "p1", "What is on the bench now?")
            await again.wait(30)
            assert "red multimeter" in again.answer, again.answer
            # A compaction's reply comes once its write (after the turn's) is acknowledged.
            await compact(client, "p1", "/compact toolcall lab-tools", None, timeout=20)
            continued = await load(client)
        assert not stack.failed

    def users(state: TranscriptState) -> list[str]:
        return [m["content"] for m in held_messages(state.messages) if m["role"] == "user"]

    assert users(continued) == [*users(before), "What is on the bench now?"]
    assert len(continued.messages) == len(before.messages) + 4  # user, call, result, answer
    assert continued.revision > before.revision
    assert restore(continued).extract(call_ids[1] or "") == restored.extract(call_ids[1] or "")


async def test_an_instance_retired_over_its_bound_reads_its_transcript_back_from_the_journal(
    tmp_path,
):
    path = tmp_path / "context-0.sqlite3"
    front = AgentRuntime(name="front")
    back = AgentRuntime(front.address, name="back")
    store = open_store(path)
    register_transcripts(back, "lab-tools", store=store, max_instances=1)
    async with front, back:
        agent = agent_on(front)
        await agent.answer(turn("t1", "Read probe 1."), started=never_started)
        await agent.mirrored()  # p1's write is journaled and its instance idle
        await agent.answer(turn("t1", "Read probe 2.", participant="p2"), started=never_started)
        await agent.mirrored()
        while "p1" in back.keyed_instances("lab-tools.transcripts"):
            await load(front, "p2")  # p2's instance retired p1's (the bound is 1)
        again = await load(front, "p1")
    store.close()
    assert held_messages(again.messages) == agent.transcript("p1").messages and again.revision == 1
    assert agent.store_refused == 0  # read back whole: nothing had to be re-sent


@pytest.mark.timeout(180)
async def test_context_clear_on_a_running_box_forgets_the_tools_transcript_and_its_rows(
    monkeypatch,
):
    from xrmq.actors.edge.private_stack import PrivateStack
    from xrmq.actors.edge.replies import ReplyCollector, ask

    from buses import PROCS
    from edge_box import journal_rows_of

    monkeypatch.setenv("PYTHONPATH", str(PROCS))  # the camera process's role: edge_roles
    monkeypatch.syspath_prepend(str(PROCS))
    async with PrivateStack(tools_stack_config()) as stack:
        assert stack.directory is not None
        collector = ReplyCollector()
        client = AgentRuntime(stack.bus, name="test-client")
        client.register("replies", collector)
        async with client, asyncio.timeout(150):
            for index in range(2):
                bench = ask(client, collector, "p2", f"What is on the bench? ({index})")
                await bench.wait(30)
                assert "red multimeter" in bench.answer, bench.answer
            before = await load(client, "p2")
            while len(before.messages) < 8:  # the last turn's write may still be on its way
                before = await load(client, "p2")
            assert len(before.messages) == 8
            assert any(
                table == "transcript_messages"
                for table, _ in journal_rows_of(stack.directory, "p2")
            )

            cleared = await asyncio.create_subprocess_exec(
                sys.executable,
                "-m",
                "xrmq.actors.cli",
                "context",
                "clear",
                "--participant",
                "p2",
                "--config",
                str(stack.directory / "edge.toml"),
                stdout=asyncio.subprocess.PIPE,
                stderr=asyncio.subprocess.PIPE,
            )
            out, err = await cleared.communicate()
            assert (cleared.returncode, out.decode().strip()) == (0, "xrmq context: cleared p2"), (
                err.decode()
            )
            assert await load(client, "p2") == TranscriptState()
            assert journal_rows_of(stack.directory, "p2") == []
