"""Property: after any sequence of operations, clear(p) leaves no trace of p and every
other participant unchanged (docs/context.md, "Lifecycle"), on the real embedded actors.

The model hangs, so compaction jobs are in flight when ``clear`` runs and nothing else
changes the other participants meanwhile.
"""

from __future__ import annotations

import asyncio
from typing import Any, Literal, cast

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from xrmq.actors.context import ContextManager
from xrmq.actors.context.section_actors import DialogueSectionActor
from xrmq.actors.models import ScriptedLLM, ScriptedResponse
from xrmq.actors.runtime import AgentRuntime
from xrmq.schemas import ConversationContextUpdate
from xrmq.topics import context_topic

pytestmark = pytest.mark.timeout(60)

T0 = 1_714_572_785_000_000
PARTICIPANTS = ("p1", "p2", "p3")
TOPICS: dict[str, Literal["incremental", "summary"]] = {
    "sample.notes": "incremental",
    "sample.monitor-window": "summary",
}

participant = st.sampled_from(PARTICIPANTS)
operation = st.one_of(
    st.tuples(st.just("exchange"), participant, st.integers(0, 40), st.integers(10, 300)),
    st.tuples(st.just("update"), participant, st.sampled_from(sorted(TOPICS)), st.integers(1, 300)),
    st.tuples(st.just("sensor"), participant, st.sampled_from(sorted(TOPICS)), st.integers(1, 300)),
    st.tuples(st.just("history"), participant, st.integers(0, 40), st.integers(1, 4)),
    st.tuples(st.just("clear"), participant, st.just(0), st.just(0)),
)


async def run(operations, target) -> None:
    llm = ScriptedLLM(default=ScriptedResponse(hang=True))
    runtime = AgentRuntime()
    context = ContextManager(
        llm,
        summary_context_topics=("sample.monitor-window",),
        incremental_context_topics=("sample.notes",),
        dialogue_budget_bytes=600,
        topic_budget_bytes=600,
    )
    runtime.register("context", context.subscriber())
    async with runtime:
        try:
            for kind, pid, a, b in operations:
                if kind == "exchange":
                    context.record_exchange(
                        pid, f"q{a}", "é" * b, timestamp_us=T0 + a, exchange_id=a
                    )
                elif kind == "update":
                    await context.update(
                        pid,
                        a,
                        ConversationContextUpdate("u" * b),
                        mode=TOPICS[a],
                        timestamp_us=T0 + b,
                    )
                elif kind == "sensor":
                    await runtime.publish(
                        context_topic(a),
                        ConversationContextUpdate(f"sensor {b}"),
                        participant_id=pid,
                    )
                elif kind == "history":
                    window = [(f"q{a + i}", "h", T0 + a + i) for i in range(b)]
                    context.reconcile_history(pid, window, exchange_ids=[a + i for i in range(b)])
                else:
                    await context.clear(pid)
            await context.synced()  # every manager write is in its section's view
            await context.clear("barrier")  # and every sensor update before this is in the replica
            sections = [_agent(runtime, f"context.topic.{name}").host for name in TOPICS]
            dialogues = runtime.keyed_instances("context.dialogue").values()
            sections += [cast(DialogueSectionActor, actor).host for actor in dialogues]
            generations = {
                host.participants[target].state.generation
                for host in sections
                if target in host.participants
            }
            others = {pid: context.blocks(pid) for pid in PARTICIPANTS if pid != target}

            await context.clear(target)

            assert context.blocks(target) == () and target not in context._replicas
            assert {pid: context.blocks(pid) for pid in others} == others
            assert target not in runtime.keyed_instances("context.dialogue")
            assert all(target not in host.participants for host in sections)
            for index in range(2):
                worker = _agent(runtime, f"context.worker.{index}")
                assert (
                    not {job.generation for job in (*worker._running, *worker._queued)}
                    & generations
                )
        finally:
            await context.close()
    assert llm.open_streams == 0


def _agent(runtime: AgentRuntime, name: str) -> Any:
    """The agent registered as ``name`` (a section or worker actor, read for its state)."""
    return runtime.agent(name)


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(operation, max_size=25), participant)
def test_clear_leaves_no_trace_of_the_participant_and_others_unchanged(operations, target):
    asyncio.run(asyncio.wait_for(run(operations, target), 20))
