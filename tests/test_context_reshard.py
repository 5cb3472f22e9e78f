"""Issue 15: a changed shard count loses no participant's context across a restart.

Section hosts journal the dialogues of the participants they own (a stable hash of the
participant over the shard count). Restarted with another count, a host finds in its
journal participants another shard owns now, and a count that went down leaves
journals no host opens: their dialogues are migrated to their owners, and every
participant's blocks are what they were. Hosts and the manager run in this process on a
real broker (ipc under the test's directory); a restart is new runtimes on the journals.
"""

from __future__ import annotations

from contextlib import AsyncExitStack

import pytest

from xrmq.actors.context import ContextManager, context_plan, open_store, register_sections
from xrmq.actors.context.messages import HostSync, HostViews
from xrmq.actors.context.store import orphan_journals
from xrmq.actors.models import ScriptedLLM
from xrmq.actors.runtime import AgentRuntime, shard_of
from xrmq.actors.runtime.address import parse_bus
from xrmq.actors.runtime.broker import Broker

pytestmark = pytest.mark.timeout(90)

NS = "reshard"
PARTICIPANTS = [f"p{i}" for i in range(12)]
T0 = 1_714_572_785_000_000


def settings(shards: int) -> dict:
    return {
        "namespace": NS,
        "incremental_context_topics": ("reshard.notes",),
        "section_hosts": shards,
        "control_timeout_s": 5.0,
    }


async def start_box(stack: AsyncExitStack, bus: str, directory, shards: int, orphans=()):
    """``shards`` section hosts on their journals, and a split manager; returns both."""
    hosts = []
    for shard in range(shards):
        runtime = AgentRuntime(bus, name=f"{NS}-host-{shard}")
        hosts.append(
            register_sections(
                runtime,
                context_plan(**settings(shards)),
                name=NS,
                shard=shard,
                shards=shards,
                topics=None if shard == 0 else [],
                store=open_store(directory / f"{NS}-{shard}.sqlite3"),
                orphans=[open_store(path) for path in orphans] if shard == 0 else (),
            )
        )
        await stack.enter_async_context(runtime)
    runtime = AgentRuntime(bus, name=f"{NS}-conversation")
    context = ContextManager(ScriptedLLM(), deployment="split", **settings(shards))
    runtime.register(NS, context.subscriber())
    await stack.enter_async_context(runtime)
    return hosts, context


async def until_blocks(context: ContextManager, expected: dict) -> None:
    while {pid: context.blocks(pid) for pid in expected} != expected:
        await context.changed()


async def test_dialogues_follow_their_participants_when_the_shard_count_changes(tmp_path):
    broker = Broker(parse_bus(f"ipc://{tmp_path}/bus")).start()
    bus = f"ipc://{tmp_path}/bus"
    try:
        async with AsyncExitStack() as stack:
            _, context = await start_box(stack, bus, tmp_path, 2)
            for index, pid in enumerate(PARTICIPANTS):
                for turn in range(2):
                    context.record_exchange(
                        pid,
                        f"{pid} asks {turn}",
                        f"answer {turn}",
                        timestamp_us=T0 + index * 10 + turn,
                        exchange_id=f"{pid}-{turn}",
                    )
            await context.synced()
            before = {pid: context.blocks(pid) for pid in PARTICIPANTS}
            assert all(len(blocks) == 2 for blocks in before.values())
        # 2 -> 3 shards: participants whose hash moves go to their new owner.
        moved = [pid for pid in PARTICIPANTS if shard_of(pid, 3) != shard_of(pid, 2)]
        assert moved  # the hash spreads these twelve over the shards
        async with AsyncExitStack() as stack:
            hosts, context = await start_box(stack, bus, tmp_path, 3)
            for host in hosts:
                await host.migration_finished()
            assert sum(host.migrated for host in hosts) == len(moved)
            assert all(host.migrating == 0 for host in hosts)
            await until_blocks(context, before)
            context.record_exchange(
                moved[0], "still there?", "yes", timestamp_us=T0 + 999, exchange_id="after-reshard"
            )
            await context.synced()
            before[moved[0]] = context.blocks(moved[0])
            assert len(before[moved[0]]) == 3
        # 3 -> 1 shard: shard 0 takes over the journals of shards 1 and 2 and removes them.
        orphans = orphan_journals(tmp_path, NS, 1)
        assert [path.name for path in orphans] == [f"{NS}-1.sqlite3", f"{NS}-2.sqlite3"]
        async with AsyncExitStack() as stack:
            (host,), context = await start_box(stack, bus, tmp_path, 1, orphans)
            await host.migration_finished()
            on_others = sum(shard_of(pid, 3) != 0 for pid in PARTICIPANTS)
            assert host.migrated == on_others
            await until_blocks(context, before)
            assert not any(path.exists() for path in orphans)
        # And once more from the one journal: nothing was left behind or duplicated.
        async with AsyncExitStack() as stack:
            (host,), context = await start_box(stack, bus, tmp_path, 1)
            await context.synced()
            assert {pid: context.blocks(pid) for pid in PARTICIPANTS} == before
            assert host.migrated == 0
    finally:
        broker.stop()


async def test_a_participant_cleared_while_their_dialogue_waits_for_migration_stays_cleared(
    tmp_path,
):
    broker = Broker(parse_bus(f"ipc://{tmp_path}/bus")).start()
    bus = f"ipc://{tmp_path}/bus"
    try:
        async with AsyncExitStack() as stack:
            _, context = await start_box(stack, bus, tmp_path, 1)
            for index, pid in enumerate(PARTICIPANTS):
                context.record_exchange(
                    pid, f"{pid} asks", "answer", timestamp_us=T0 + index, exchange_id=f"{pid}-0"
                )
            await context.synced()
            before = {pid: context.blocks(pid) for pid in PARTICIPANTS}
        to_shard_1 = [pid for pid in PARTICIPANTS if shard_of(pid, 2) == 1]
        cleared, kept = to_shard_1[0], to_shard_1[1:]
        assert kept
        async with AsyncExitStack() as stack:
            # Shard 1 is not up: shard 0 holds its participants' dialogues, waiting.
            runtime = AgentRuntime(bus, name=f"{NS}-host-0")
            host = register_sections(
                runtime,
                context_plan(**settings(2)),
                name=NS,
                shard=0,
                shards=2,
                store=open_store(tmp_path / f"{NS}-0.sqlite3"),
            )
            await stack.enter_async_context(runtime)
            manager = AgentRuntime(bus, name=f"{NS}-conversation")
            context = ContextManager(
                ScriptedLLM(), deployment="split", **{**settings(2), "control_timeout_s": 0.5}
            )
            manager.register(NS, context.subscriber())
            await stack.enter_async_context(manager)
            assert host.migrating == len(to_shard_1)
            with pytest.raises(TimeoutError):
                await context.clear(cleared)  # its owner does not answer: it is down
            assert host.migrating == len(kept)  # but it is not migrated later either
            shard_1 = AgentRuntime(bus, name=f"{NS}-host-1")
            register_sections(
                shard_1,
                context_plan(**settings(2)),
                name=NS,
                shard=1,
                shards=2,
                topics=[],
                store=open_store(tmp_path / f"{NS}-1.sqlite3"),
            )
            await stack.enter_async_context(shard_1)
            await host.migration_finished()
            assert host.migrated == len(kept)
            await until_blocks(context, {pid: before[pid] for pid in kept})
            await context.synced()
            for shard in (0, 1):  # no host holds it: their snapshots, from their journals
                snapshot = await manager.ask(
                    context.plan.topics.host_sync(shard),
                    HostSync(cleared),
                    reply_type=HostViews,
                    timeout=10,
                )
                assert snapshot.views == ()
            assert context.blocks(cleared) == ()
    finally:
        broker.stop()
