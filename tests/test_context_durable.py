"""Durable context, local deployment (issue 15): the journal, clear/close, corruption, dump/load
and manual compaction through ``ContextManager``'s public API.

A "restart" here stops the runtime without ``close()`` (what a killed process leaves is
tested across real processes in ``test_context_recovery.py``) and builds a new manager
on the same journal. Tests wait on events (replica changes, model requests), never on
sleeps.
"""

from __future__ import annotations

import asyncio
import sqlite3
from contextlib import asynccontextmanager
from typing import Any

import msgspec
import pytest

from xrmq.actors.context import ContextManager
from xrmq.actors.context.dump import DUMP_VERSION, decode_dump
from xrmq.actors.context.manual import CompactStatus
from xrmq.actors.context.store import SCHEMA_VERSION, StoreError, open_store
from xrmq.actors.models import ModelError, ScriptedLLM, ScriptedResponse
from xrmq.actors.runtime import AgentRuntime
from xrmq.schemas import ConversationContextUpdate

pytestmark = pytest.mark.timeout(30)

T0 = 1_714_572_785_000_000
SECOND = 1_000_000
NOTES, SCENE = "sample.notes", "sample.scene"
TOPICS: dict[str, Any] = {
    "incremental_context_topics": (NOTES,),
    "summary_context_topics": (SCENE,),
}
SMALL = {
    "dialogue_budget_bytes": 600,
    "topic_budget_bytes": 600,
    "compaction_input_budget_bytes": 900,
}


@asynccontextmanager
async def manager(llm, store, *, close: bool = False, **kwargs):
    """A manager on ``store`` in a runtime; leaving stops the runtime without ``close()``
    (a restart keeps the journal) unless ``close``."""
    runtime = AgentRuntime()
    context = ContextManager(llm, store=store, **TOPICS, **kwargs)
    runtime.register("context", context.subscriber())
    async with runtime:
        async with asyncio.timeout(15):
            yield context
        if close:
            await context.close()


async def until(context: ContextManager, predicate) -> None:
    while not predicate():
        await context.changed()


def texts(context: ContextManager, participant: str) -> list[str]:
    return [block.text for block in context.blocks(participant)]


async def fill(
    context: ContextManager, participant: str, exchanges: int = 3, notes: int = 2
) -> None:
    for i in range(exchanges):
        context.record_exchange(
            participant,
            f"{participant} question {i}",
            f"answer {i}",
            timestamp_us=T0 + i * SECOND,
            exchange_id=f"{participant}-turn-{i}",
        )
    for i in range(notes):
        await context.update(
            participant,
            NOTES,
            ConversationContextUpdate(f"{participant} note {i}"),
            mode="incremental",
            timestamp_us=T0 + (10 + i) * SECOND,
        )
    await context.update(
        participant,
        SCENE,
        ConversationContextUpdate(f"{participant} is at bench {exchanges}"),
        mode="summary",
        timestamp_us=T0 + 20 * SECOND,
    )
    await context.synced()


async def test_a_manager_on_the_same_journal_starts_with_every_acknowledged_write(tmp_path):
    store = tmp_path / "context.sqlite3"
    async with manager(ScriptedLLM(), store) as context:
        for participant in ("p1", "p2"):
            await fill(context, participant)
        before = {p: context.blocks(p) for p in ("p1", "p2")}
    restarted = ContextManager(ScriptedLLM(), store=store, **TOPICS)
    assert {p: restarted.blocks(p) for p in ("p1", "p2")} == before  # before any runtime starts
    runtime = AgentRuntime()
    runtime.register("context", restarted.subscriber())
    async with runtime:
        await restarted.synced()
        assert {p: restarted.blocks(p) for p in ("p1", "p2")} == before
        restarted.record_exchange(
            "p1", "p1 question 0", "answer 0", timestamp_us=T0, exchange_id="p1-turn-0"
        )  # known from the journal
        restarted.record_exchange(
            "p1", "follow-up", "yes", timestamp_us=T0 + 30 * SECOND, exchange_id="new"
        )
        await restarted.synced()
        after = texts(restarted, "p1")
        assert after[:-1] == [block.text for block in before["p1"]]
        assert "follow-up" in after[-1] and sum("p1 question 0" in text for text in after) == 1
        await restarted.close()


async def test_compacted_notes_and_summaries_survive_a_restart(tmp_path):
    store = tmp_path / "context.sqlite3"
    llm = ScriptedLLM(default="Rolling summary: the notes so far.")
    # The scripted summary is a placeholder without the notes' numbers (the guards would refuse
    # it); this test is about the journal, not summary quality.
    async with manager(llm, store, summary_guards=False, **SMALL) as context:
        for i in range(8):
            await context.update(
                "p1",
                NOTES,
                ConversationContextUpdate(f"note {i} " + "x" * 60),
                mode="incremental",
                timestamp_us=T0 + i * SECOND,
            )
        await until(
            context, lambda: any("Rolling summary" in text for text in texts(context, "p1"))
        )
        await context.synced()
        before = context.blocks("p1")
    async with manager(
        ScriptedLLM(default="Rolling summary: the notes so far."),
        store,
        summary_guards=False,
        **SMALL,
    ) as again:
        assert again.blocks("p1") == before
        await again.synced()
        assert again.blocks("p1") == before


async def test_a_pending_compaction_is_reissued_after_a_restart(tmp_path):
    store = tmp_path / "context.sqlite3"
    hanging = ScriptedLLM(default=ScriptedResponse(hang=True))
    async with manager(hanging, store, **SMALL) as context:
        for i in range(6):
            await context.update(
                "p1",
                NOTES,
                ConversationContextUpdate(f"note {i} " + "y" * 60),
                mode="incremental",
                timestamp_us=T0 + i * SECOND,
            )
        # the job is in flight (and journaled) when the process "dies"
        await hanging.wait_streaming()
        await context.synced()
    answering = ScriptedLLM(default="Summary after the restart.")
    # The scripted summary is a placeholder without the notes' numbers (the guards would refuse
    # it); this test is about the reissued request, not summary quality.
    async with manager(answering, store, summary_guards=False, **SMALL) as again:
        await until(
            again, lambda: any("Summary after the restart." in text for text in texts(again, "p1"))
        )
        assert answering.requests[0].messages[1].content == hanging.requests[0].messages[1].content


async def test_a_cleared_participant_stays_cleared_after_a_restart_and_close_leaves_no_rows(
    tmp_path,
):
    store = tmp_path / "context.sqlite3"
    async with manager(ScriptedLLM(), store) as context:
        await fill(context, "p1")
        await fill(context, "p2")
        await context.clear("p1")
        with pytest.raises(StoreError, match="in use by another process"):
            # one process per journal, never moved
            open_store(store, on_corrupt="backup_and_start_empty")
    journal = open_store(store)
    assert journal.recovered.keys() == {
        ("p2", "dialogue"),
        ("p2", f"topic:{NOTES}"),
        ("p2", f"topic:{SCENE}"),
    }
    journal.close()
    async with manager(ScriptedLLM(), store, close=True) as again:
        assert again.blocks("p1") == ()
        assert again.blocks("p2") != ()
    journal = open_store(store)
    assert journal.rows() == 0 and journal.recovered == {}


async def fill_journal(store, participant: str) -> None:
    async with manager(ScriptedLLM(), store) as context:
        await fill(context, participant)


async def test_clear_and_close_of_a_manager_never_started_remove_its_journal_rows(tmp_path):
    store = tmp_path / "context.sqlite3"
    async with manager(ScriptedLLM(), store) as context:
        await fill(context, "p1")
    await fill_journal(store, "p2")
    unstarted = ContextManager(ScriptedLLM(), store=store, **TOPICS)
    assert unstarted.blocks("p1") != () and unstarted.blocks("p2") != ()
    await unstarted.clear("p2")
    assert unstarted.blocks("p2") == ()
    assert {pid for pid, _ in unstarted.store.recovered} == {"p1", "p2"}  # as opened
    assert unstarted.store._db.execute("SELECT DISTINCT participant FROM sections").fetchall() == [
        ("p1",)
    ]
    await unstarted.close()
    assert open_store(store).rows() == 0


def test_a_corrupt_journal_is_one_error_naming_the_file(tmp_path):
    store = tmp_path / "context.sqlite3"
    store.write_bytes(b"this is not a database" * 100)
    with pytest.raises(StoreError) as error:
        ContextManager(ScriptedLLM(), store=store, **TOPICS)
    assert str(store) in str(error.value) and "backup_and_start_empty" in str(error.value)


async def test_a_truncated_journal_is_one_error_and_backup_and_start_empty_moves_it_aside(tmp_path):
    store = tmp_path / "context.sqlite3"
    async with manager(ScriptedLLM(), store) as context:
        await fill(context, "p1", exchanges=40)
    journal = open_store(store)
    journal.close()  # checkpointed into the main file on close
    data = store.read_bytes()
    store.write_bytes(data[: len(data) // 2])
    with pytest.raises(StoreError, match=str(store)):
        ContextManager(ScriptedLLM(), store=store, **TOPICS)
    fresh = ContextManager(
        ScriptedLLM(), store=store, on_corrupt="backup_and_start_empty", **TOPICS
    )
    assert fresh.blocks("p1") == ()
    backup = fresh.store.backup_path
    assert backup is not None and backup.exists() and backup.read_bytes() == data[: len(data) // 2]
    assert backup.name.startswith("context.sqlite3.corrupt-")
    await fresh.close()


def test_a_journal_of_another_schema_version_is_refused_naming_the_file(tmp_path):
    store = tmp_path / "context.sqlite3"
    open_store(store).close()
    db = sqlite3.connect(store)
    db.execute(f"PRAGMA user_version = {SCHEMA_VERSION + 1}")
    db.commit()
    db.close()
    with pytest.raises(
        StoreError, match=f"{store}: written by schema version {SCHEMA_VERSION + 1}"
    ):
        open_store(store)
    moved = open_store(store, on_corrupt="backup_and_start_empty")
    assert moved.backup_path is not None and moved.recovered == {}


def test_an_older_journal_is_migrated_step_by_step(tmp_path, monkeypatch):
    from xrmq.actors.context import store as store_module

    path = tmp_path / "context.sqlite3"
    open_store(path).close()
    db = sqlite3.connect(path)
    db.execute("ALTER TABLE jobs RENAME TO jobs_v1")
    db.execute("PRAGMA user_version = 1")
    db.commit()
    db.close()
    steps: list[int] = []

    def to_v2(db: sqlite3.Connection) -> None:
        steps.append(1)
        db.execute("ALTER TABLE jobs_v1 RENAME TO jobs")

    monkeypatch.setattr(store_module, "SCHEMA_VERSION", 2)
    monkeypatch.setitem(store_module.MIGRATIONS, 1, to_v2)
    opened = store_module.open_store(path)
    assert steps == [1] and opened.rows() == 0
    assert opened._db.execute("PRAGMA user_version").fetchone()[0] == 2


async def test_dump_then_load_into_a_fresh_manager_gives_equal_blocks_twice_records_nothing_twice(
    tmp_path,
):
    llm = ScriptedLLM(default="Summary of the earlier notes.")
    # The scripted summary is a placeholder without the notes' numbers (the guards would refuse
    # it); this test is about dump and load, not summary quality.
    async with manager(llm, tmp_path / "a.sqlite3", summary_guards=False, **SMALL) as source:
        await fill(source, "p1", exchanges=4, notes=8)
        await until(
            source, lambda: any("Summary of the earlier notes." in t for t in texts(source, "p1"))
        )
        await fill(source, "p2")
        await source.synced()
        data = await source.dump()
        one = await source.dump("p2")
        expected = {p: source.blocks(p) for p in ("p1", "p2")}
    dump = decode_dump(data)
    assert dump.version == DUMP_VERSION and [p.participant_id for p in dump.participants] == [
        "p1",
        "p2",
    ]
    assert [p.participant_id for p in decode_dump(one).participants] == ["p2"]
    async with manager(ScriptedLLM(), None, **SMALL) as fresh:
        assert await fresh.load(data) == 6
        assert {p: fresh.blocks(p) for p in ("p1", "p2")} == expected
        await fresh.load(data)
        assert {p: fresh.blocks(p) for p in ("p1", "p2")} == expected
        assert await fresh.dump() == data  # nothing recorded twice, not even an identity
        fresh.record_exchange(
            "p1", "p1 question 0", "answer 0", timestamp_us=T0, exchange_id="p1-turn-0"
        )
        await fresh.synced()
        assert fresh.blocks("p1") == expected["p1"]


async def test_load_rejects_what_is_not_a_dump_of_a_known_version():
    async with manager(ScriptedLLM(), None) as context:
        with pytest.raises(ValueError, match="not an xrmq context dump"):
            await context.load(b"\x93garbage")
        newer = msgspec.msgpack.encode(
            {"format": "xrmq.context.dump", "version": DUMP_VERSION + 1, "participants": []}
        )
        with pytest.raises(ValueError, match="newer than this xrmq reads"):
            await context.load(newer)


async def test_compact_below_the_threshold_compacts_the_entries():
    llm = ScriptedLLM(default="Manual summary of two notes.")
    # The scripted summary is a placeholder without the notes' numbers (the guards would refuse
    # it); this test is about manual compaction below the threshold, not summary quality.
    async with manager(llm, None, summary_guards=False) as context:
        await fill(context, "p1", exchanges=3, notes=2)
        outcome = await context.compact("p1")
        assert outcome.status is CompactStatus.COMPACTED
        assert {s.section: s.status for s in outcome.sections} == {
            "dialogue": CompactStatus.COMPACTED,
            NOTES: CompactStatus.COMPACTED,
        }
        blocks = texts(context, "p1")
        assert sum("Manual summary of two notes." in text for text in blocks) == 2
        assert not any("p1 note" in text for text in blocks)
        assert any("p1 question 2" in text for text in blocks)  # the newest exchange stays verbatim
        assert not any("p1 question 0" in text for text in blocks)


async def test_compact_with_nothing_to_compact_says_so_and_changes_nothing():
    llm = ScriptedLLM()
    async with manager(llm, None) as context:
        context.record_exchange(
            "p1", "only question", "only answer", timestamp_us=T0, exchange_id="t1"
        )
        await context.synced()
        before = context.blocks("p1")
        outcome = await context.compact("p1")
        assert outcome.status is CompactStatus.NOTHING_TO_CONDENSE
        assert (await context.compact("p1", NOTES)).status is CompactStatus.NOTHING_TO_CONDENSE
        assert (await context.compact("nobody")).status is CompactStatus.NOTHING_TO_CONDENSE
        assert context.blocks("p1") == before and llm.requests == []
        with pytest.raises(ValueError, match="section: must be 'dialogue' or an incremental topic"):
            await context.compact("p1", SCENE)


async def test_compact_with_a_failing_model_keeps_the_entries():
    llm = ScriptedLLM(default=ScriptedResponse(error=ModelError("scripted", "provider down")))
    # The seed's rule, unguarded: with the summary guards on, a manual compaction goes on to the
    # extractive fallback instead (test_context_manual_guards.py).
    async with manager(llm, None, summary_guards=False) as context:
        await fill(context, "p1", exchanges=3, notes=2)
        before = context.blocks("p1")
        outcome = await context.compact("p1", NOTES)
        assert outcome.status is CompactStatus.SUMMARIZE_FAILED
        assert "provider down" in outcome.sections[0].detail
        assert context.blocks("p1") == before


async def test_a_write_the_journal_failed_to_commit_is_acknowledged_only_once_a_retry_committed_it(
    tmp_path,
):
    store = tmp_path / "context.sqlite3"
    async with manager(ScriptedLLM(), store) as context:
        journal = context.store
        commit = journal._write
        failed: list[int] = []

        def failing_once(rows):
            if not failed:
                failed.append(len(rows))
                raise sqlite3.OperationalError("disk I/O error")
            return commit(rows)

        journal._write = failing_once
        await context.update(
            "p1",
            NOTES,
            ConversationContextUpdate("kept despite the failure"),
            mode="incremental",
            timestamp_us=T0,
        )
        assert failed and journal.failures == 1 and journal.commits >= 1
    recovered = open_store(store).recovered[("p1", f"topic:{NOTES}")]
    assert [
        entry.text.endswith("kept despite the failure") for entry in recovered.state.entries
    ] == [True]


async def test_a_notes_flood_while_compaction_hangs_keeps_the_section_bounded_and_counted(tmp_path):
    """Issue 30 item 3: whatever the write rate, a topic section holds at most four budgets
    of uncompacted notes (plus the newest), in memory and in its journal row; the rest is
    dropped oldest first and counted, never held while compaction lags."""
    store = tmp_path / "context.sqlite3"
    hanging = ScriptedLLM(default=ScriptedResponse(hang=True))
    notes = 1000
    async with manager(hanging, store, **SMALL) as context:
        for i in range(notes):
            await context.update(
                "p1",
                NOTES,
                ConversationContextUpdate(f"reading {i}: " + "x" * 200),
                mode="incremental",
                timestamp_us=T0 + i * SECOND,
            )
        await context.synced()
        assert any(
            block.text.endswith(f"reading {notes - 1}: " + "x" * 200)
            for block in context.blocks("p1")
        )
    with sqlite3.connect(store) as db:
        (blob,) = db.execute(
            "SELECT state FROM sections WHERE participant = 'p1' AND section = ?",
            (f"topic:{NOTES}",),
        ).fetchone()
    state = msgspec.msgpack.decode(blob)
    stored = sum(entry["size"] for entry in state["entries"][:-1])
    assert stored <= 4 * SMALL["topic_budget_bytes"]
    assert len(blob) < 4 * SMALL["topic_budget_bytes"] + 2_000
    assert state["dropped_entries"] + len(state["entries"]) == notes
