"""The context journal's safety (issue 30 items 9 and 11): its files are private (0600)
in a private state directory, and a row that cannot be read (a section's or a tools
transcript's) is quarantined for its participant alone while everyone else's context
loads; both in the store, in a local manager and in a context process (``xrmq run``).

The corrupt rows are written with ``sqlite3`` directly, as a damaged disk or a foreign
writer would leave them. Tests wait on the manager's events, never on sleeps.
"""

from __future__ import annotations

import asyncio
import os
import sqlite3
import stat
import subprocess
import sys
from contextlib import asynccontextmanager, contextmanager
from pathlib import Path
from typing import Any

import msgspec
import pytest
from structlog.testing import capture_logs
from tools_doubles import Probe, never_started, probe_reading, session_model, turn

from xrmq.actors.context import ContextManager
from xrmq.actors.context.store import open_store
from xrmq.actors.edge.config_loader import decode_config, default_config
from xrmq.actors.edge.configfile import write_config
from xrmq.actors.edge.stack import context_store_path, open_context_store, open_orphan_stores
from xrmq.actors.models import ScriptedLLM
from xrmq.actors.runtime import AgentRuntime
from xrmq.actors.runtime.address import UnsafeDirectoryError
from xrmq.actors.tools.policy import AutoCompactor
from xrmq.actors.tools.store import (
    TranscriptLoad,
    TranscriptState,
    TranscriptTopics,
    register_transcripts,
)
from xrmq.actors.tools.tool import Tool
from xrmq.actors.tools.tool_agent import ToolAgent
from xrmq.schemas import ConversationContextUpdate
from xrmq.topics import VOICE_OUTPUT_TOPIC

from buses import broker_process
from router_doubles import FakeContext

pytestmark = pytest.mark.timeout(30)

T0 = 1_714_572_785_000_000
SECOND = 1_000_000
NOTES, SCENE = "sample.notes", "sample.scene"
TOPICS: dict[str, Any] = {
    "incremental_context_topics": (NOTES,),
    "summary_context_topics": (SCENE,),
}
PARTICIPANTS = ("p1", "p2", "p3")


@contextmanager
def umask(mask: int):
    old = os.umask(mask)
    try:
        yield
    finally:
        os.umask(old)


@asynccontextmanager
async def manager(store: Path):
    """A local manager on ``store`` in a runtime; leaving stops it without ``close()``."""
    runtime = AgentRuntime()
    context = ContextManager(ScriptedLLM(), store=store, **TOPICS)
    runtime.register("context", context.subscriber())
    async with runtime:
        async with asyncio.timeout(15):
            yield context


async def fill(context: ContextManager, participant: str) -> None:
    for i in range(2):
        context.record_exchange(
            participant,
            f"{participant} question {i}",
            f"answer {i}",
            timestamp_us=T0 + i * SECOND,
            exchange_id=f"{participant}-turn-{i}",
        )
    await context.update(
        participant,
        NOTES,
        ConversationContextUpdate(f"{participant} keeps the spare key under the mat"),
        mode="incremental",
        timestamp_us=T0 + 10 * SECOND,
    )
    await context.update(
        participant,
        SCENE,
        ConversationContextUpdate(f"{participant} is in the kitchen"),
        mode="summary",
        timestamp_us=T0 + 20 * SECOND,
    )
    await context.synced()


def mode(path: Path) -> int:
    return stat.S_IMODE(os.stat(path).st_mode)


# --- item 9: private files in a private directory -----------------------------------------


async def test_every_journal_file_is_0600_after_writes_whatever_the_umask(tmp_path):
    store = tmp_path / "state" / "context.sqlite3"
    with umask(0o022):
        async with manager(store) as context:
            await fill(context, "p1")
            wal = Path(f"{store}-wal")
            assert store.exists() and wal.exists()
            files = [p for p in (store, wal, Path(f"{store}-shm")) if p.exists()]
            assert {str(p): mode(p) for p in files} == {str(p): 0o600 for p in files}
    assert mode(store.parent) == 0o700


def test_a_journal_left_readable_by_an_older_xrmq_is_made_0600_when_opened(tmp_path):
    store = tmp_path / "context.sqlite3"
    open_store(store).close()
    for suffix in ("", "-wal", "-shm"):
        Path(f"{store}{suffix}").touch()
        os.chmod(f"{store}{suffix}", 0o644)
    journal = open_store(store)
    try:
        for suffix in ("", "-wal", "-shm"):
            path = Path(f"{store}{suffix}")
            assert not path.exists() or mode(path) == 0o600, path
    finally:
        journal.close()


def test_the_empty_journal_started_after_a_corrupt_one_is_moved_aside_is_0600(tmp_path):
    store = tmp_path / "context.sqlite3"
    store.write_bytes(b"this is not a database" * 100)
    with umask(0o022):
        journal = open_store(store, on_corrupt="backup_and_start_empty")
    try:
        assert journal.backup_path is not None and mode(journal.backup_path) == 0o600
        assert mode(store) == 0o600
    finally:
        journal.close()


def edge_config(state: Path):
    return decode_config(
        {
            "context": {"topics": {"notes": {"mode": "incremental"}}, "state_dir": str(state)},
            "bus": {"address": "ipc:///tmp/some/bus"},
        }
    )


@pytest.mark.parametrize("dir_mode", [0o750, 0o755, 0o701])
def test_a_state_dir_open_to_other_users_is_refused_naming_the_path_and_the_rule(
    tmp_path, dir_mode
):
    state = tmp_path / "state"
    state.mkdir()
    os.chmod(state, dir_mode)
    for opening in (
        lambda: open_context_store(edge_config(state), 0),
        lambda: open_orphan_stores(edge_config(state), 1),
    ):
        with pytest.raises(UnsafeDirectoryError) as error:
            opening()
        message = str(error.value)
        assert f"context.state_dir: directory {state}" in message
        assert f"mode {dir_mode:04o}, needs 0700" in message
    assert list(state.iterdir()) == []  # nothing written there


def test_a_state_dir_that_is_a_symlink_is_refused(tmp_path):
    real = tmp_path / "real"
    real.mkdir(mode=0o700)
    link = tmp_path / "state"
    link.symlink_to(real)
    with pytest.raises(
        UnsafeDirectoryError, match=f"context.state_dir: directory {link} is a symlink"
    ):
        open_context_store(edge_config(link), 0)


def test_a_missing_state_dir_is_created_0700_and_used(tmp_path):
    state = tmp_path / "deep" / "state"
    with umask(0o022):
        journal = open_context_store(edge_config(state), 0)
    assert journal is not None
    try:
        assert mode(state) == 0o700 and mode(journal.path) == 0o600
    finally:
        journal.close()


# --- item 11: a corrupt row is quarantined for its participant ------------------------------


async def three_participants(store: Path) -> dict[str, Any]:
    async with manager(store) as context:
        for participant in PARTICIPANTS:
            await fill(context, participant)
        return {p: context.blocks(p) for p in PARTICIPANTS}


def corrupt(store: Path, sql: str, *parameters: object) -> None:
    db = sqlite3.connect(store)
    assert db.execute(sql, parameters).rowcount == 1
    db.commit()
    db.close()


def quarantine_rows(db: sqlite3.Connection) -> list[tuple[str, str, str, str]]:
    """The quarantine table through ``db`` (an open journal's own connection: it holds
    the file exclusively)."""
    return db.execute(
        "SELECT participant, source, section, reason FROM quarantine ORDER BY source"
    ).fetchall()


@pytest.mark.parametrize("section", ["dialogue", f"topic:{NOTES}"])
async def test_a_corrupt_row_of_one_participant_is_quarantined_and_the_others_load_intact(
    tmp_path, section
):
    store = tmp_path / "context.sqlite3"
    before = await three_participants(store)
    corrupt(
        store,
        "UPDATE sections SET state = x'c1c1c1' WHERE participant = 'p2' AND section = ?",
        section,
    )
    with capture_logs() as logs:
        restarted = ContextManager(ScriptedLLM(), store=store, **TOPICS)  # on_corrupt="error"
    journal = restarted.store
    assert journal is not None and journal.backup_path is None
    assert journal.quarantined >= 1
    quarantined = [log for log in logs if log["event"] == "context.journal_rows_quarantined"]
    assert [(log["participant"], log["sections"]) for log in quarantined] == [("p2", [section])]
    assert "corrupt" in quarantined[0]["reason"] and quarantined[0]["rows"] == journal.quarantined
    rows = quarantine_rows(journal._db)
    assert {(p, s) for p, _, s, _ in rows} == {("p2", section)}
    assert ("p2", "sections", section) in {(p, source, s) for p, source, s, _ in rows}
    assert len(rows) == journal.quarantined
    runtime = AgentRuntime()
    runtime.register("context", restarted.subscriber())
    async with runtime:
        async with asyncio.timeout(15):
            await restarted.synced()
            assert restarted.host is not None
            assert restarted.host.gauges()["context.journal_quarantined"] == journal.quarantined
            for participant in ("p1", "p3"):
                assert restarted.blocks(participant) == before[participant]
            p2 = [block.text for block in restarted.blocks("p2")]
            kept = [block.text for block in before["p2"]]
            lost = "p2 question" if section == "dialogue" else "spare key"
            assert not any(lost in text for text in p2)
            assert [text for text in kept if lost not in text] == p2
            await restarted.update(
                "p2",
                NOTES,
                ConversationContextUpdate("p2 wrote again after the quarantine"),
                mode="incremental",
                timestamp_us=T0 + 30 * SECOND,
            )
            await restarted.synced()
            assert any("wrote again" in block.text for block in restarted.blocks("p2"))
    with capture_logs() as logs:
        again = open_store(store)
    try:
        assert again.quarantined == 0  # a restart does not count them again
        assert not [log for log in logs if log["event"] == "context.journal_rows_quarantined"]
        assert len(quarantine_rows(again._db)) == len(rows)
        assert {pid for pid, _ in again.recovered} == set(PARTICIPANTS)
    finally:
        again.close()


async def test_a_corrupt_pending_job_is_quarantined_alone_and_its_section_loads(tmp_path):
    store = tmp_path / "context.sqlite3"
    before = await three_participants(store)
    db = sqlite3.connect(store)
    db.execute(
        "INSERT INTO jobs VALUES ('p2', ?, x'c1')", (f"topic:{NOTES}",)
    )  # a job nobody can decode
    db.commit()
    db.close()
    journal = open_store(store)
    try:
        assert journal.quarantined == 1
        assert quarantine_rows(journal._db)[0][:3] == ("p2", "jobs", f"topic:{NOTES}")
        assert journal.recovered[("p2", f"topic:{NOTES}")].state.pending is None
    finally:
        journal.close()
    async with manager(store) as context:
        assert {p: context.blocks(p) for p in PARTICIPANTS} == before


def test_quarantined_rows_keep_the_original_values(tmp_path):
    store = tmp_path / "context.sqlite3"
    open_store(store).close()
    db = sqlite3.connect(store)
    db.execute("INSERT INTO sections VALUES ('p9', 'dialogue', x'c1c2', 'w', 7, x'')")
    db.commit()
    db.close()
    open_store(store).close()
    db = sqlite3.connect(store)
    (row,) = db.execute("SELECT row FROM quarantine").fetchall()
    db.close()
    assert msgspec.msgpack.decode(row[0]) == ["p9", "dialogue", b"\xc1\xc2", "w", 7, b""]


# --- both, in a context process (``xrmq run context``) ----------------------------------------


def box_config(tmp_path: Path, bus: str, state: Path) -> tuple[Path, Any]:
    """The default box on ``bus`` with its journals in ``state``: (file, config)."""
    base = default_config()
    config = msgspec.structs.replace(
        base,
        context=msgspec.structs.replace(base.context, state_dir=str(state)),
        bus=msgspec.structs.replace(base.bus, address=bus),
    )
    path = tmp_path / "edge.toml"
    return path, write_config(config, path)


def run_context(config_path: Path) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, "-m", "xrmq.actors.cli", "run", "context", "--config", str(config_path)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, "XRMQ_LOG_LEVEL": "ERROR"},
    )


def test_a_context_process_refuses_a_state_dir_open_to_others_exiting_2_naming_it(tmp_path):
    state = tmp_path / "state"
    state.mkdir(mode=0o700)
    os.chmod(state, 0o755)
    with broker_process() as bus:
        proc = run_context(box_config(tmp_path, bus, state)[0])
        _out, err = proc.communicate(timeout=30)
    assert proc.returncode == 2  # fatal: not restarted
    assert f"context.state_dir: directory {state} must not be accessible" in err
    assert list(state.iterdir()) == []


async def test_a_context_process_with_a_corrupt_row_starts_with_everyone_else_s_context(tmp_path):
    state = tmp_path / "state"
    with broker_process() as bus:
        config_path, config = box_config(tmp_path, bus, state)
        journal = context_store_path(config, 0)
        async with manager_on(journal) as context:
            for participant in PARTICIPANTS:
                await fill_dialogue(context, participant)
        corrupt(
            journal,
            "UPDATE sections SET state = x'c1' WHERE participant = 'p2' AND section = 'dialogue'",
        )
        proc = run_context(config_path)
        try:
            assert proc.stdout is not None
            assert proc.stdout.readline().startswith("xrmq run: ready context")
        finally:
            proc.terminate()
            _out, err = proc.communicate(timeout=30)
    assert "context.journal_rows_quarantined" in err and '"participant": "p2"' in err
    reopened = open_store(journal)
    try:
        assert reopened.quarantined == 0
        assert {pid for pid, _ in reopened.recovered} == {"p1", "p3"}
        assert {row[:3] for row in quarantine_rows(reopened._db)} == {
            ("p2", "sections", "dialogue"),
            ("p2", "identities", "dialogue"),  # its exchange's identity goes with it
        }
    finally:
        reopened.close()


@asynccontextmanager
async def manager_on(store: Path):
    """A local manager with the box's topics on ``store`` (the box's journal)."""
    runtime = AgentRuntime()
    context = ContextManager(
        ScriptedLLM(),
        store=store,
        incremental_context_topics=("notes",),
        summary_context_topics=("scene",),
    )
    runtime.register("context", context.subscriber())
    async with runtime:
        async with asyncio.timeout(15):
            yield context


async def fill_dialogue(context: ContextManager, participant: str) -> None:
    context.record_exchange(
        participant, f"{participant} asks", "an answer", timestamp_us=T0, exchange_id=participant
    )
    await context.synced()


# --- item 11 for the tools transcripts journaled in the same file ----------------------------


def tools_agent(runtime: AgentRuntime):
    return ToolAgent(
        session_model(),
        context=FakeContext(),
        runtime=runtime,
        output_topic=VOICE_OUTPUT_TOPIC,
        tools=[Tool("probe", "Read a probe.", Probe, probe_reading)],
        transcripts="lab-tools",
        compactor=AutoCompactor(enabled=False),
        discovery_timeout_s=2.0,
    )


@asynccontextmanager
async def transcripts_on(store):
    """A front runtime (for a tools agent or loads) and a back one hosting the transcripts
    of ``lab-tools`` journaled in ``store`` (closed on leaving)."""
    front = AgentRuntime(name="front")
    back = AgentRuntime(front.address, name="back")
    register_transcripts(back, "lab-tools", store=store)
    try:
        async with front, back:
            async with asyncio.timeout(20):
                yield front
    finally:
        store.close()


async def transcript_of(runtime: AgentRuntime, participant: str):
    return await runtime.ask(
        TranscriptTopics.of("lab-tools").load,
        TranscriptLoad(),
        reply_type=TranscriptState,
        participant_id=participant,
        timeout=10,
    )


async def journal_two_transcripts(path: Path):
    async with transcripts_on(open_store(path)) as front:
        agent = tools_agent(front)
        for participant in ("p1", "p2"):
            await agent.answer(
                turn("t1", "Read probe 1.", participant=participant), started=never_started
            )
        await agent.mirrored()
        return await transcript_of(front, "p1")


@pytest.mark.parametrize(
    ("garbage", "reason"),
    [("x'c1'", "corrupt transcript ("), ("'not a blob'", "corrupt transcript header")],
)
async def test_a_transcript_that_cannot_be_read_is_quarantined_and_the_others_load(
    tmp_path, garbage, reason
):
    path = tmp_path / "context-0.sqlite3"
    before = await journal_two_transcripts(path)
    assert before.messages
    corrupt(path, f"UPDATE transcripts SET header = {garbage} WHERE participant = 'p2'")
    store = open_store(path)  # a header of the wrong type was the whole journal's StoreError
    with capture_logs() as logs:
        async with transcripts_on(store) as front:
            assert store.quarantined > 1  # the header and p2's messages
            assert await transcript_of(front, "p1") == before
            assert (await transcript_of(front, "p2")).messages == ()
    again = open_store(path)
    try:
        assert again.quarantined == 0 and set(again.transcripts) == {("p1", "lab-tools")}
        rows = quarantine_rows(again._db)
        assert len(rows) == store.quarantined
        assert {(p, s) for p, _, s, _ in rows} == {("p2", "lab-tools")}
        assert all(r.startswith(reason) for *_, r in rows)
    finally:
        again.close()
    if garbage == "x'c1'":  # decoded (and quarantined) by the transcripts' owner
        assert [
            log["participant"] for log in logs if log["event"] == "context.journal_rows_quarantined"
        ] == ["p2"]
