"""Durable context on a real edge stack (issue 15): ``xrmq up``'s supervisor runs every
process; the context process and the conversation process are each killed with
SIGKILL mid-session and restarted by the supervisor. Afterwards every participant's
prompt still holds their notes, scene and earlier dialogue: the offline model answers
from them. A split ContextManager in this process watches the section views; waits are
for ready lines, views and replies, never sleeps.
"""

from __future__ import annotations

import asyncio

import msgspec
import pytest

from xrmq.actors.context import ContextManager
from xrmq.actors.edge.config import RestartPolicyConfig
from xrmq.actors.edge.config_loader import default_config
from xrmq.actors.edge.private_stack import PrivateStack
from xrmq.actors.edge.replies import ReplyCollector, ask
from xrmq.actors.edge.stack import plan_of
from xrmq.actors.runtime import AgentRuntime
from xrmq.schemas import ConversationContextUpdate
from xrmq.topics import context_topic

pytestmark = pytest.mark.timeout(120)

PARTICIPANTS = [f"p{i}" for i in range(1, 6)]


def stack_config():
    base = default_config()
    restart = RestartPolicyConfig(max_crashes=3, backoff_initial_s=0.05, backoff_max_s=0.2)
    supervisor = msgspec.structs.replace(base.supervisor, restart=restart, shutdown_timeout_s=5.0)
    return msgspec.structs.replace(base, supervisor=supervisor)


async def until(context: ContextManager, predicate) -> None:
    while not predicate():
        await context.changed()


def holds(context: ContextManager, participant: str, text: str) -> bool:
    return any(text in block.text for block in context.blocks(participant))


async def session(kill: str) -> None:
    async with PrivateStack(stack_config()) as stack:
        config = stack.config
        assert config is not None  # the stack has started
        plan = plan_of(config)
        watcher = ContextManager(
            None,  # type: ignore[arg-type]  # a watcher only reads; it never calls a model
            deployment="split",
            **config.context.manager_kwargs(),
            compaction_workers=plan.compaction_workers,
        )
        collector = ReplyCollector()
        client = AgentRuntime(stack.bus, name="test-client")
        client.register("replies", collector)
        client.register("watcher", watcher.subscriber())
        async with client, asyncio.timeout(90):
            for i, pid in enumerate(PARTICIPANTS):
                await client.publish(
                    context_topic("scene"),
                    ConversationContextUpdate(f"{pid} is at bench B{i}7."),
                    participant_id=pid,
                    source="sensor",
                )
                await client.publish(
                    context_topic("notes"),
                    ConversationContextUpdate(f"The spare key of {pid} is in drawer D{i}4."),
                    participant_id=pid,
                    source="sensor",
                )
            for i, pid in enumerate(PARTICIPANTS):
                turn = ask(
                    client, collector, pid, f"My locker code is {4470 + i}, please remember it."
                )
                await turn.wait(20)
            await until(
                watcher,
                lambda: all(
                    holds(watcher, pid, f"locker code is {4470 + i}")
                    and holds(watcher, pid, f"drawer D{i}4")
                    for i, pid in enumerate(PARTICIPANTS)
                ),
            )
            before = {pid: watcher.blocks(pid) for pid in PARTICIPANTS}

            await stack.kill(kill)
            if kill == "context":
                # its start, then the host's restart
                await until(watcher, lambda: watcher.resyncs >= 2)
                assert {pid: watcher.blocks(pid) for pid in PARTICIPANTS} == before
            for i, pid in enumerate(PARTICIPANTS):
                key = ask(client, collector, pid, "Which drawer holds the spare key?")
                await key.wait(20)
                assert f"D{i}4" in key.answer, key.answer
                bench = ask(client, collector, pid, "Which bench am I at?")
                await bench.wait(20)
                assert f"B{i}7" in bench.answer, bench.answer
                code = ask(client, collector, pid, "What is my locker code?")
                await code.wait(20)
                assert str(4470 + i) in code.answer, code.answer
        assert not stack.failed


async def test_after_a_kill_of_the_context_process_turns_answer_from_dialogue_notes_and_scene():
    await session("context")


async def test_after_a_kill_of_the_conversation_process_every_prompt_still_holds_notes_and_scene():
    await session("conversation")
