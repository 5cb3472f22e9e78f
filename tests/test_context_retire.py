"""Idle participants retired to the journal (issue 30 item 3): a topic section with a
journal keeps in memory at most ``max_resident_participants`` (and only those written
within ``retire_idle_s``); a retired participant lives in the journal alone and is
loaded back, whole, by its next write, load, compaction or clear, and is read from the
journal by a fetch, a snapshot and a dump.
"""

from __future__ import annotations

import asyncio
import sqlite3
from contextlib import asynccontextmanager

import pytest

from xrmq.actors.context import ContextManager, register_sections
from xrmq.actors.context import section_residency as sections_module
from xrmq.actors.context.dump import decode_dump
from xrmq.actors.context.journal import TOPIC_JOURNAL_PREFIX
from xrmq.actors.context.plan import context_plan
from xrmq.actors.context.store import open_store
from xrmq.actors.models import ScriptedLLM, ScriptedResponse
from xrmq.actors.runtime import AgentRuntime
from xrmq.schemas import ConversationContextUpdate

pytestmark = pytest.mark.timeout(60)

NOTES = "sample.notes"


@asynccontextmanager
async def manager(store, **kwargs):
    runtime = AgentRuntime()
    context = ContextManager(
        ScriptedLLM(), store=store, incremental_context_topics=(NOTES,), **kwargs
    )
    runtime.register("context", context.subscriber())
    async with runtime:
        async with asyncio.timeout(45):
            yield context


def notes_host(context: ContextManager):
    assert context.host is not None
    return context.host.topics[0].host


async def note(context: ContextManager, participant: str, text: str) -> None:
    await context.update(participant, NOTES, ConversationContextUpdate(text), mode="incremental")


def texts(context: ContextManager, participant: str) -> str:
    return "\n".join(block.text for block in context.blocks(participant))


async def test_a_section_host_keeps_at_most_its_resident_limit_and_every_note_answers(tmp_path):
    async with manager(tmp_path / "c.sqlite3", max_resident_participants=8) as context:
        for i in range(50):
            await note(context, f"p{i}", f"p{i} keeps the key in drawer {i}")
        await context.synced()
        host = notes_host(context)
        assert len(host.participants) <= 8
        assert host.retired >= 42
        assert len(host.participant_ids()) == 50
        # a fetch (the host's views) answers every participant, through the journal
        views = dict(host.views())
        assert len(views) == 50
        for i in range(50):
            (_, view), *_ = host.views(f"p{i}")
            assert f"drawer {i}" in view.blocks[0].text
        assert len(host.participants) <= 8  # reading did not bring them back


async def test_a_write_to_a_retired_participant_lands_on_its_journaled_state(tmp_path):
    async with manager(tmp_path / "c.sqlite3", max_resident_participants=8) as context:
        for i in range(20):
            await note(context, f"p{i}", f"p{i} first note")
        await context.synced()
        host = notes_host(context)
        assert "p0" not in host.participants
        await note(context, "p0", "p0 second note")
        await context.synced()
        assert host.loaded >= 1
        text = texts(context, "p0")
        assert "p0 first note" in text and "p0 second note" in text
        exported = host.export("p0")
        assert exported is not None and len(exported.entries) == 2


async def test_a_restart_and_a_resync_include_retired_participants(tmp_path):
    store = tmp_path / "c.sqlite3"
    async with manager(store, max_resident_participants=4) as context:
        for i in range(30):
            await note(context, f"p{i}", f"p{i} note")
        await context.synced()
        await context._resync(0)
        assert all(f"p{i} note" in texts(context, f"p{i}") for i in range(30))
        dumped = decode_dump(await context.dump())
        assert {participant.participant_id for participant in dumped.participants} == {
            f"p{i}" for i in range(30)
        }
    async with manager(store, max_resident_participants=4) as restarted:
        await restarted.synced()
        for i in range(30):
            await restarted.ensure(f"p{i}")
            assert f"p{i} note" in texts(restarted, f"p{i}")


async def test_clearing_a_retired_participant_forgets_it_everywhere(tmp_path):
    async with manager(tmp_path / "c.sqlite3", max_resident_participants=2) as context:
        for i in range(10):
            await note(context, f"p{i}", f"p{i} note")
        await context.synced()
        host = notes_host(context)
        assert "p0" not in host.participants and "p1" not in host.participants
        await context.clear("p0")
        assert texts(context, "p0") == ""
        assert "p0" not in host.participant_ids()
        await note(context, "p0", "p0 starts again")
        await context.synced()
        assert "p0 note" not in texts(context, "p0")


async def test_participants_idle_past_retire_idle_s_are_retired(tmp_path, monkeypatch):
    async with manager(tmp_path / "c.sqlite3", retire_idle_s=600) as context:
        for i in range(5):
            await note(context, f"p{i}", f"p{i} note")
        await context.synced()
        host = notes_host(context)
        assert len(host.participants) == 5  # under the limit, and recently written
        now = sections_module.time.monotonic()
        monkeypatch.setattr(sections_module.time, "monotonic", lambda: now + 601)
        host.sweep()
        assert host.participants == {}
        assert "p3 note" in texts(context, "p3")
        (_, view), *_ = host.views("p3")
        assert "p3 note" in view.blocks[0].text


async def test_a_restart_reaches_ready_without_loading_idle_topic_participants(tmp_path):
    store = tmp_path / "c.sqlite3"
    async with manager(store) as context:
        for start in range(0, 1000, 100):
            await asyncio.gather(
                *(note(context, f"p{i}", f"p{i} first note") for i in range(start, start + 100))
            )
        await context.synced()
    journal = open_store(store, on_demand_prefix=TOPIC_JOURNAL_PREFIX)  # a context process's
    assert journal.recovered == {}  # nothing of the topic read at opening
    runtime = AgentRuntime()
    host = register_sections(
        runtime, context_plan(incremental_context_topics=(NOTES,)), store=journal
    )
    replica = ContextManager(
        ScriptedLLM(),
        deployment="split",
        incremental_context_topics=(NOTES,),
        snapshot_at_start=False,
    )
    runtime.register("replica", replica.subscriber())
    async with runtime:
        async with asyncio.timeout(45):
            notes = host.topics[0].host
            assert notes.participants == {} and notes.loaded == 0  # ready, none loaded
            assert len(notes.participant_ids()) == 1000
            await replica.update(
                "p7", NOTES, ConversationContextUpdate("p7 second note"), mode="incremental"
            )
            await replica.synced()
            assert notes.loaded == 1 and list(notes.participants) == ["p7"]
            text = texts(replica, "p7")
            assert "p7 first note" in text and "p7 second note" in text
            assert await replica.ensure("p8")
            assert "p8 first note" in texts(replica, "p8")
            assert list(notes.participants) == ["p7"]  # a fetch reads the journal only


@pytest.mark.parametrize(
    ("key", "value", "rule"),
    [
        ("retire_idle_s", 0.5, "from 1 to 86400"),
        ("retire_idle_s", 100_000, "from 1 to 86400"),
        ("max_resident_participants", 0, "from 1 to 10000000"),
        ("max_resident_participants", True, "int"),
    ],
)
def test_retirement_settings_out_of_range_are_refused_naming_the_field(key, value, rule):
    with pytest.raises(ValueError, match=f"{key}: .*{rule}"):
        context_plan(incremental_context_topics=(NOTES,), **{key: value})


def test_the_box_config_sets_retirement_and_refuses_it_out_of_range(tmp_path):
    from xrmq.actors.edge.config import ConfigError
    from xrmq.actors.edge.config_loader import load_config
    from xrmq.actors.edge.stack import plan_of

    good = tmp_path / "good.toml"
    good.write_text("[context]\nretire_idle_s = 120\nmax_resident_participants = 500\n")
    plan = plan_of(load_config(good))
    assert (plan.retire_idle_s, plan.max_resident_participants) == (120.0, 500)
    bad = tmp_path / "bad.toml"
    bad.write_text("[context]\nmax_resident_participants = 0\n")
    with pytest.raises(
        ConfigError, match=r"context.max_resident_participants: must be in \[1, 10000000\], got 0"
    ):
        load_config(bad)


async def test_a_corrupt_row_read_on_demand_is_quarantined_for_its_participant_alone(tmp_path):
    store = tmp_path / "c.sqlite3"
    async with manager(store) as context:
        for i in range(5):
            await note(context, f"p{i}", f"p{i} first note")
        await context.synced()
    db = sqlite3.connect(store)
    db.execute("UPDATE sections SET state = x'c1' WHERE participant = 'p2'")
    db.commit()
    db.close()
    journal = open_store(store, on_demand_prefix=TOPIC_JOURNAL_PREFIX)
    assert journal.quarantined == 0  # not read yet
    runtime = AgentRuntime()
    host = register_sections(
        runtime, context_plan(incremental_context_topics=(NOTES,)), store=journal
    )
    replica = ContextManager(
        ScriptedLLM(),
        deployment="split",
        incremental_context_topics=(NOTES,),
        snapshot_at_start=False,
    )
    runtime.register("replica", replica.subscriber())
    async with runtime:
        async with asyncio.timeout(45):
            for i in range(5):
                await replica.ensure(f"p{i}")  # a fetch reads the journal
            assert journal.quarantined == 1
            assert [f"p{i} first note" in texts(replica, f"p{i}") for i in range(5)] == [
                True,
                True,
                False,
                True,
                True,
            ]
            await replica.update(
                "p2", NOTES, ConversationContextUpdate("p2 again"), mode="incremental"
            )
            await replica.synced()
            assert "p2 again" in texts(replica, "p2")
            assert host.gauges()["context.journal_quarantined"] == 1


@asynccontextmanager
async def small_runtime_manager(store, keyed_instances: int):
    runtime = AgentRuntime(keyed_instances=keyed_instances)
    context = ContextManager(ScriptedLLM(), store=store, incremental_context_topics=(NOTES,))
    runtime.register("context", context.subscriber())
    async with runtime:
        async with asyncio.timeout(45):
            yield context


async def exchange(context: ContextManager, participant: str, n: int) -> None:
    context.record_exchange(
        participant,
        f"{participant} question {n}",
        f"{participant} answer {n}",
        timestamp_us=1_714_572_785_000_000 + n * 1_000_000,
        exchange_id=f"{participant}-{n}",
    )


async def test_a_dialogue_retired_over_the_runtime_s_keyed_limit_comes_back_whole(tmp_path):
    async with small_runtime_manager(tmp_path / "c.sqlite3", keyed_instances=8) as context:
        for i in range(20):
            await exchange(context, f"p{i}", 0)
        await context.synced()
        assert context.host is not None
        assert len(context.host.runtime.keyed_instances("context.dialogue")) <= 8
        await exchange(context, "p0", 1)  # p0's dialogue actor was retired
        await context.synced()
        text = texts(context, "p0")
        assert "p0 question 0" in text and "p0 question 1" in text
        # every dialogue is in the snapshot and the dump, retired or not
        views = dict(context.host.views())
        assert all(f"p{i}" in views for i in range(20))
        dumped = decode_dump(await context.dump())
        with_dialogue = {
            participant.participant_id
            for participant in dumped.participants
            if any(section.kind == "dialogue" for section in participant.sections)
        }
        assert with_dialogue == {f"p{i}" for i in range(20)}


async def test_a_retired_dialogue_s_pending_compaction_is_re_issued_when_it_comes_back(tmp_path):
    # The summary keeps the questions' numbers, as a summary guard asks of it (the newest
    # too: the guard takes "question 11" for an update of "question 10", so it is current).
    summary = "Summary of the p0 dialogue: questions 0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11."
    llm = ScriptedLLM(ScriptedResponse(hang=True), default=summary)
    runtime = AgentRuntime(keyed_instances=4)
    context = ContextManager(
        llm,
        store=tmp_path / "c.sqlite3",
        incremental_context_topics=(NOTES,),
        dialogue_budget_bytes=600,
        topic_budget_bytes=600,
        compaction_input_budget_bytes=900,
        compaction_timeout_s=0.5,  # the hung worker's copy is retried at the other one
    )
    runtime.register("context", context.subscriber())
    async with runtime:
        async with asyncio.timeout(30):
            for n in range(12):
                context.record_exchange(
                    "p0",
                    f"p0 question {n} " + "x" * 80,
                    f"answer {n}",
                    timestamp_us=1_714_572_785_000_000 + n * 1_000_000,
                    exchange_id=f"p0-{n}",
                )
            await llm.wait_streaming()  # p0's compaction is out, and hangs
            for i in range(1, 10):
                await exchange(context, f"p{i}", 0)  # p0's actor is retired
            await context.synced()
            assert context.host is not None
            assert "p0" not in context.host.runtime.keyed_instances("context.dialogue")
            await exchange(context, "p0", 99)  # back from the journal, its job timed again
            while not any("Summary of the p0" in block.text for block in context.blocks("p0")):
                await context.changed()
            assert len(llm.requests) >= 2
