"""Taking back a participant's exchange (``ContextManager.retract_exchange``): what a
retried or revised turn does to the shared context's dialogue.

The retraction is a dialogue write (``RecordExchanges.retracted``), so it travels the
writes' path: the section applies it, journals it and publishes a view every replica
takes. Across real OS processes: a broker, the section host with its journal (killed with
SIGKILL and started again on it), and two managers (two replicas) in this process.
"""

from __future__ import annotations

import asyncio
import json
import signal
from typing import Any

import pytest

from xrmq.actors.context import CompactionSettings, ContextManager, Section, SectionSpec
from xrmq.actors.context.state import exchange_identity
from xrmq.actors.models import ScriptedLLM
from xrmq.actors.runtime import AgentRuntime

from buses import broker_process, expect_line, python, reap

pytestmark = pytest.mark.timeout(90)

PID = "p1"
T0 = 1_714_572_785_000_000
PLAN: dict[str, Any] = {"namespace": "retract-test", "control_timeout_s": 30.0}


async def until(context: ContextManager, predicate) -> None:
    while not predicate():
        await context.changed()


def dialogue(context: ContextManager) -> str:
    return "\n".join(block.text for block in context.blocks(PID))


def record(context: ContextManager, turn: int, request: str, answer: str) -> None:
    context.record_exchange(
        PID, request, answer, timestamp_us=T0 + turn * 1_000_000, exchange_id=f"turn-{turn}"
    )


def manager(bus: str, name: str) -> tuple[AgentRuntime, ContextManager]:
    runtime = AgentRuntime(bus, name=name)
    context = ContextManager(ScriptedLLM(), deployment="split", **PLAN)
    runtime.register(PLAN["namespace"], context.subscriber())
    return runtime, context


async def test_a_retracted_exchange_leaves_every_replica_and_stays_gone_after_a_host_kill(
    tmp_path,
):
    journal = str(tmp_path / "context.sqlite3")
    with broker_process() as bus:
        sections = python("context_sections.py", bus, json.dumps(PLAN), journal)
        procs = [sections]
        try:
            await asyncio.to_thread(expect_line, sections, "ready")
            runtime_a, writer = manager(bus, "replica-a")
            runtime_b, other = manager(bus, "replica-b")
            async with runtime_a, runtime_b:
                record(writer, 1, "Where is the spare battery?", "In cabinet C7.")
                record(writer, 2, "And the charger?", "On shelf S3.")
                await writer.synced()
                await until(other, lambda: "shelf S3" in dialogue(other))

                await writer.retract_exchange(PID, "turn-2")
                # read-your-writes: applied when it returns
                assert "shelf S3" not in dialogue(writer)
                assert "And the charger?" not in dialogue(writer)
                assert "cabinet C7" in dialogue(writer)
                await until(other, lambda: "shelf S3" not in dialogue(other))
                assert "cabinet C7" in dialogue(other)

                # idempotent: again, an unknown identity, and the same exchange re-sent
                await writer.retract_exchange(PID, "turn-2")
                await writer.retract_exchange(PID, "turn-9")
                record(writer, 2, "And the charger?", "On shelf S3.")
                await writer.synced()
                assert "shelf S3" not in dialogue(writer)
                assert "cabinet C7" in dialogue(writer)

                # kill -9 the context process; its journal holds the retraction
                sections.send_signal(signal.SIGKILL)
                await asyncio.to_thread(sections.wait)
                resyncs = (writer.resyncs, other.resyncs)
                sections = python("context_sections.py", bus, json.dumps(PLAN), journal)
                procs.append(sections)
                await asyncio.to_thread(expect_line, sections, "ready")
                await until(writer, lambda: writer.resyncs > resyncs[0])
                await until(other, lambda: other.resyncs > resyncs[1])
                for replica in (writer, other):
                    assert "cabinet C7" in dialogue(replica)
                    assert "shelf S3" not in dialogue(replica)

            # a manager started afterwards builds its replica from the restarted host
            runtime_c, late = manager(bus, "replica-c")
            async with runtime_c:
                await until(late, lambda: late.resyncs > 0)
                assert "cabinet C7" in dialogue(late)
                assert "shelf S3" not in dialogue(late)
        finally:
            reap(*procs)


async def test_retracting_counts_what_it_took_back_and_what_it_did_not_find():
    context = ContextManager(ScriptedLLM(), incremental_context_topics=("notes",))
    runtime = AgentRuntime()
    runtime.register("context", context.subscriber())
    async with runtime:
        record(context, 1, "Where is the spare battery?", "In cabinet C7.")
        await context.retract_exchange(PID, "turn-1")
        await context.retract_exchange(PID, "turn-1")
        await context.retract_exchange(PID, "never-recorded")
        assert "cabinet C7" not in dialogue(context)
        gauges = runtime.metrics().gauges
    assert gauges["context.exchanges_retracted"] == 1
    assert gauges["context.retracts_unknown"] == 2
    with pytest.raises(ValueError, match="exchange_id"):
        await context.retract_exchange(PID, None)
    await context.close()


def test_the_section_takes_back_an_entry_by_identity_once_and_never_adds_it_again():
    section = Section(SectionSpec("dialogue", "dialogue", 4000), CompactionSettings(2256))
    state = section.new_state("g")
    section.record_exchange(state, "Q1?", "A1.", timestamp_us=T0, exchange_id="turn-1")
    section.record_exchange(state, "Q2?", "A2.", timestamp_us=T0 + 1, exchange_id="turn-2")
    state.backlog = [entry.entry_id for entry in state.entries]
    revision = state.revision
    identity = exchange_identity("", "", None, "turn-2")

    assert section.retract_exchange(state, identity)
    assert [entry.identity for entry in state.entries] == [
        exchange_identity("", "", None, "turn-1")
    ]
    assert state.backlog == [state.entries[0].entry_id]
    assert state.revision > revision
    assert not section.retract_exchange(state, identity)  # once
    assert not section.retract_exchange(state, b"")  # a topic entry's empty identity
    assert not section.record_exchange(
        state, "Q2?", "A2.", timestamp_us=T0 + 1, exchange_id="turn-2"
    )  # re-sent: known, not added again
    assert "A2." not in "".join(block.text for block in section.render(state).blocks)
