"""Issue 15: two managers writing one participant's topic; a write re-sent after a section
host's restart applies once.

Each section remembers every writer's last applied write (``SectionView.acks``, and the
journal's ``sections.acks``), not only the latest writer's. Here both managers write in
the same moment while the views that would acknowledge their writes are lost (a lossy
hop drops every view), so both writes are still unacknowledged when the host restarts
from its journal: each manager re-sends its write, and the restarted host recognizes
both, whichever came last. The host runs in this process on a real ipc bus; its restart
is a new runtime (new epoch) on the same journal file.
"""

from __future__ import annotations

import asyncio
import sqlite3
from typing import Any

import msgspec
import pytest

from xrmq.actors.context import ContextManager, context_plan, open_store, register_sections
from xrmq.actors.context.messages import HostSync, HostViews
from xrmq.actors.context.store import SCHEMA_VERSION
from xrmq.actors.models import ScriptedLLM
from xrmq.actors.runtime import AgentRuntime
from xrmq.schemas import ConversationContextUpdate

from lossy_bus import LossyBus

pytestmark = pytest.mark.timeout(60)

NAMESPACE, NOTES, PARTICIPANT = "writers", "writers.notes", "p1"
SETTINGS: dict[str, Any] = {
    "namespace": NAMESPACE,
    "incremental_context_topics": (NOTES,),
    "control_timeout_s": 30.0,
}


def host_runtime(bus: str, path) -> AgentRuntime:
    runtime = AgentRuntime(bus, name="writers-host")
    register_sections(runtime, context_plan(**SETTINGS), name=NAMESPACE, store=open_store(path))
    return runtime


def manager_runtime(bus: str, name: str) -> tuple[AgentRuntime, ContextManager]:
    runtime = AgentRuntime(bus, name=name)
    context = ContextManager(ScriptedLLM(), deployment="split", **SETTINGS)
    runtime.register(NAMESPACE, context.subscriber())
    return runtime, context


def notes(context: ContextManager) -> list[str]:
    return [block.text.rsplit("] ", 1)[-1] for block in context.blocks(PARTICIPANT)]


async def test_writes_of_two_managers_re_sent_after_a_host_restart_apply_once(tmp_path):
    view_key = f"{NAMESPACE}.view\x00".encode()
    lossy = {"views": True}
    bus = LossyBus(
        f"{tmp_path}/bus",
        lambda frames: lossy["views"] and frames[1] != b"" and frames[0].startswith(view_key),
    )  # views, not readiness probes
    journal = tmp_path / "context-0.sqlite3"
    host = host_runtime(bus.address, journal)
    try:
        await host.start()
        (runtime_a, a), (runtime_b, b) = (manager_runtime(bus.address, n) for n in ("a", "b"))
        async with runtime_a, runtime_b:
            writes = [
                asyncio.create_task(
                    a.update(
                        PARTICIPANT,
                        NOTES,
                        ConversationContextUpdate("note from a"),
                        mode="incremental",
                        timestamp_us=1_000_000,
                    )
                ),
                asyncio.create_task(
                    b.update(
                        PARTICIPANT,
                        NOTES,
                        ConversationContextUpdate("note from b"),
                        mode="incremental",
                        timestamp_us=2_000_000,
                    )
                ),
            ]
            sync = a.plan.topics.host_sync(0)
            # Asked after each write from the same runtime: answered once it is journaled.
            snapshots = await asyncio.gather(
                *(
                    runtime.ask(sync, HostSync(PARTICIPANT), reply_type=HostViews, timeout=20)
                    for runtime in (runtime_a, runtime_b)
                )
            )
            ((_, view),) = snapshots[1].views
            assert [block.text.rsplit("] ", 1)[-1] for block in view.blocks] == [
                "note from a",
                "note from b",
            ]
            assert not any(write.done() for write in writes)  # no view reached them
            await host.stop()  # both writes applied and journaled, neither acknowledged
            lossy["views"] = False
            host = host_runtime(bus.address, journal)
            await host.start()  # a new epoch: both managers resync and re-send
            await asyncio.wait_for(asyncio.gather(*writes), 20)
            await a.synced()
            await b.synced()
            assert a.resyncs >= 2 and b.resyncs >= 2  # at start, and after the restart
            # Make sure the re-sent writes have reached the host before looking.
            final = await runtime_a.ask(
                sync, HostSync(PARTICIPANT), reply_type=HostViews, timeout=20
            )
            ((_, view),) = final.views
            assert [block.text.rsplit("] ", 1)[-1] for block in view.blocks] == [
                "note from a",
                "note from b",
            ]
            assert notes(a) == notes(b) == ["note from a", "note from b"]
            assert {writer for writer, _ in view.acks} == {a.id, b.id}
    finally:
        await host.stop()
        bus.close()


def test_a_version_1_journal_keeps_its_acknowledged_write_as_the_only_writer(tmp_path):
    path = tmp_path / "context.sqlite3"
    db = sqlite3.connect(path)
    db.execute(
        "CREATE TABLE sections (participant TEXT NOT NULL, section TEXT NOT NULL, "
        "state BLOB NOT NULL, ack_writer TEXT NOT NULL, ack_seq INTEGER NOT NULL, "
        "PRIMARY KEY (participant, section)) WITHOUT ROWID"
    )
    db.execute(
        "CREATE TABLE identities (participant TEXT NOT NULL, section TEXT NOT NULL, "
        "identity BLOB NOT NULL, PRIMARY KEY (participant, section, identity)) "
        "WITHOUT ROWID"
    )
    db.execute(
        "CREATE TABLE jobs (participant TEXT NOT NULL, section TEXT NOT NULL, "
        "job BLOB NOT NULL, PRIMARY KEY (participant, section)) WITHOUT ROWID"
    )
    plan = context_plan(**SETTINGS)
    section = plan.config.topics[0]
    state = section.new_state("g1")
    section.append_update(state, "old note", timestamp_us=1_000_000)
    body = msgspec.msgpack.encode(msgspec.structs.replace(state, exchange_identities=set()))
    db.execute(
        "INSERT INTO sections VALUES (?, ?, ?, ?, ?)",
        ("p1", f"topic:{NOTES}", body, "manager-1", 7),
    )
    db.execute("PRAGMA user_version = 1")
    db.commit()
    db.close()
    store = open_store(path)
    try:
        recovered = store.recovered[("p1", f"topic:{NOTES}")]
        assert recovered.acks == (("manager-1", 7),)
        assert [entry.text.endswith("] old note") for entry in recovered.state.entries] == [True]
        assert store._run(store._db.execute, "PRAGMA user_version").fetchone()[0] == SCHEMA_VERSION
    finally:
        store.close()
