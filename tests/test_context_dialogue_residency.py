"""Dialogues kept in memory only while their participants are active (issue 30 item 3).

A context process opens its journal with every section read on demand: a restart reads
the participants' ids (and the sections with a pending compaction), so its time does not
grow with participants who are not active, and a participant's dialogue actor starts
from the journal when first used. A dialogue actor unused for ``retire_idle_s`` retires
to the journal; without a journal it never does, and one the runtime retires over its
``keyed_instances`` bound drops its dialogue with a count. The journal is still read
through once after a restart, in the background, so a row that cannot be read is
quarantined then. Tests wait on the manager's events and the host's, never on sleeps.
"""

from __future__ import annotations

import asyncio
import sqlite3
from contextlib import asynccontextmanager

import msgspec
import pytest
from structlog.testing import capture_logs

from xrmq.actors.context import ContextManager, register_sections
from xrmq.actors.context import context_host as context_host_module
from xrmq.actors.context import section_actors as section_actors_module
from xrmq.actors.context.dump import decode_dump
from xrmq.actors.context.journal import ON_DEMAND_ALL
from xrmq.actors.context.plan import context_plan
from xrmq.actors.context.store import open_store
from xrmq.actors.edge.config_loader import default_config
from xrmq.actors.edge.stack import context_store_path, open_context_store
from xrmq.actors.models import ScriptedLLM
from xrmq.actors.runtime import AgentRuntime

pytestmark = pytest.mark.timeout(60)

NOTES = "sample.notes"
KIND = "context.dialogue"
T0 = 1_714_572_785_000_000


@asynccontextmanager
async def manager(store, *, keyed_instances: int = 4096, **kwargs):
    runtime = AgentRuntime(keyed_instances=keyed_instances)
    context = ContextManager(
        ScriptedLLM(), store=store, incremental_context_topics=(NOTES,), **kwargs
    )
    runtime.register("context", context.subscriber())
    async with runtime:
        async with asyncio.timeout(45):
            yield context


def exchange(context: ContextManager, participant: str, n: int) -> None:
    context.record_exchange(
        participant,
        f"{participant} question {n}",
        f"{participant} answer {n}",
        timestamp_us=T0 + n * 1_000_000,
        exchange_id=f"{participant}-{n}",
    )


def texts(context: ContextManager, participant: str) -> str:
    return "\n".join(block.text for block in context.blocks(participant))


async def journal_dialogues(store, count: int) -> None:
    async with manager(store) as context:
        for i in range(count):
            exchange(context, f"p{i}", 0)
        await context.synced()


@asynccontextmanager
async def restarted(journal):
    """A section host on ``journal`` and a replica that fetches participants on demand."""
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
            yield runtime, host, replica


async def test_a_restart_reaches_ready_without_spawning_idle_dialogues(tmp_path):
    store = tmp_path / "c.sqlite3"
    await journal_dialogues(store, 200)
    journal = open_store(store, on_demand_prefix=ON_DEMAND_ALL)
    assert journal.recovered == {}  # no dialogue read at opening
    async with restarted(journal) as (runtime, host, replica):
        assert runtime.keyed_instances(KIND) == {}  # ready, no dialogue actor spawned
        assert len(host.dialogues_held) == 200
        exchange(replica, "p7", 1)
        await replica.synced()
        text = texts(replica, "p7")
        assert "p7 question 0" in text and "p7 question 1" in text  # whole, from the journal
        assert list(runtime.keyed_instances(KIND)) == ["p7"]
        assert await replica.ensure("p8")  # a fetch reads the journal only
        assert "p8 question 0" in texts(replica, "p8")
        assert list(runtime.keyed_instances(KIND)) == ["p7"]
        assert len(dict(host.views())) == 200  # a snapshot has every dialogue
        dumped = decode_dump(await replica.dump())  # in pages, read from the journal
        assert {
            participant.participant_id
            for participant in dumped.participants
            if any(section.kind == "dialogue" for section in participant.sections)
        } == {f"p{i}" for i in range(200)}
        assert list(runtime.keyed_instances(KIND)) == ["p7"]


async def test_a_context_process_opens_its_journal_reading_no_dialogue(tmp_path):
    base = default_config()
    state = tmp_path / "state"
    state.mkdir(mode=0o700)
    config = msgspec.structs.replace(
        base, context=msgspec.structs.replace(base.context, state_dir=str(state))
    )
    path = context_store_path(config, 0)
    await journal_dialogues(path, 3)
    journal = open_context_store(config, 0)
    assert journal is not None
    try:
        assert journal.recovered == {}
        assert sorted(journal.section_participants("dialogue")) == ["p0", "p1", "p2"]
    finally:
        journal.close()


async def test_a_dialogue_unused_past_retire_idle_s_retires_to_the_journal_and_comes_back_whole(
    tmp_path, monkeypatch
):
    async with manager(tmp_path / "c.sqlite3", retire_idle_s=600) as context:
        for i in range(5):
            exchange(context, f"p{i}", 0)
        await context.synced()
        host = context.host
        assert host is not None
        runtime = host.runtime
        assert runtime is not None
        actors = runtime.keyed_instances(KIND)
        assert len(actors) == 5
        assert not await actors["p0"].retire_if_idle()  # used just now
        now = section_actors_module.time.monotonic()
        monkeypatch.setattr(section_actors_module.time, "monotonic", lambda: now + 601)
        for actor in actors.values():
            await actor.retire_if_idle()  # (or its own timer, which fires now too)
        assert runtime.keyed_instances(KIND) == {}
        assert host.dialogues_held == {f"p{i}" for i in range(5)}
        assert {pid for pid, _ in host.views()} == {f"p{i}" for i in range(5)}
        exchange(context, "p3", 1)
        await context.synced()
        text = texts(context, "p3")
        assert "p3 question 0" in text and "p3 question 1" in text
        assert host.gauges()["context.dialogues_lost"] == 0


async def test_without_a_journal_dialogues_never_retire_idle_and_each_dropped_is_counted(
    monkeypatch,
):
    async with manager(None, keyed_instances=4, retire_idle_s=600) as context:
        host = context.host
        assert host is not None
        runtime = host.runtime
        assert runtime is not None
        lost = asyncio.Event()
        counted = host.dialogue_lost

        def dialogue_lost(participant: str) -> None:
            counted(participant)
            lost.set()

        monkeypatch.setattr(host, "dialogue_lost", dialogue_lost)
        for i in range(4):
            exchange(context, f"p{i}", 0)
        await context.synced()
        now = section_actors_module.time.monotonic()
        monkeypatch.setattr(section_actors_module.time, "monotonic", lambda: now + 601)
        for actor in runtime.keyed_instances(KIND).values():
            assert not await actor.retire_if_idle()  # memory is all there is
        assert len(runtime.keyed_instances(KIND)) == 4
        with capture_logs() as logs:
            for i in range(4, 6):
                exchange(context, f"p{i}", 0)
                await context.synced()
            while host.dialogues_lost < 2:
                lost.clear()
                await lost.wait()
        assert host.gauges()["context.dialogues_lost"] == 2
        assert [log["participant"] for log in logs if log["event"] == "context.dialogue_lost"] == [
            "p0"  # rate-limited: the second within the interval is counted, not logged
        ]


async def test_a_corrupt_dialogue_row_past_the_first_page_is_quarantined_in_the_background(
    tmp_path, monkeypatch
):
    store = tmp_path / "c.sqlite3"
    await journal_dialogues(store, 5)
    db = sqlite3.connect(store)
    db.execute("UPDATE sections SET state = x'c1' WHERE participant = 'p4'")
    db.commit()
    db.close()
    monkeypatch.setattr(context_host_module, "CHECK_PAGE", 2)  # p4 is on the third page
    journal = open_store(store, on_demand_prefix=ON_DEMAND_ALL)
    assert journal.quarantined == 0
    async with restarted(journal) as (runtime, host, _replica):
        await host.checked.wait()
        assert journal.quarantined == 2  # its state, and its exchange's identity
        assert host.gauges()["context.journal_quarantined"] == 2
        assert runtime.keyed_instances(KIND) == {}  # read, not loaded
        assert {pid for pid, _ in host.views()} == {"p0", "p1", "p2", "p3"}
