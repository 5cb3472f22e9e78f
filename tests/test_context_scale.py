"""Context at scale, scaled down to CI size (issue 30 items 1 and 2), across real processes:
a broker, a section host with its journal, and this (the conversation's) process with a
split ``ContextManager``.

- A replica smaller than the participants it serves (a cache of 64, 200 participants with a
  note each) fetches an evicted participant's views from its section host before an answer
  is built: the answer and ``blocks()`` still hold the note.
- A host snapshot larger than the bus's message limit (64 KiB here, 4 MiB in a box) is
  paged: a replica resyncs completely from a restarted host, and ``xrmq context show``
  fetches the one participant it shows.

Progress is awaited on handshakes (ready lines, replica changes), never on sleeps.
"""

from __future__ import annotations

import asyncio
import io
import json
import signal

import msgspec
import pytest

from xrmq.actors.context import ContextManager
from xrmq.actors.context.dump import decode_dump
from xrmq.actors.context.messages import HostDump, HostSync, HostViews, SectionView
from xrmq.actors.context.replica import ParticipantReplica
from xrmq.actors.conversation import Conversation
from xrmq.actors.edge.config_loader import default_config
from xrmq.actors.edge.context_commands import show, with_manager
from xrmq.actors.edge.stack import plan_of
from xrmq.actors.models import OfflineLLM
from xrmq.actors.runtime import AgentRuntime
from xrmq.schemas import AgentTurn, ContextBlock, ConversationContextUpdate
from xrmq.topics import VOICE_OUTPUT_TOPIC

from buses import broker_process, expect_line, python, reap

pytestmark = pytest.mark.timeout(180)

T0 = 1_714_572_785_000_000
SECOND = 1_000_000
PLAN = {
    "incremental_context_topics": ["notes"],
    "summary_context_topics": ["scene"],
    "namespace": "scale-test",
    "compaction_workers": 1,
    "control_timeout_s": 30.0,
}


def note(participant: str) -> str:
    number = participant[1:]
    return f"The spare battery of {participant} is in cabinet C{number}-7."


async def until(context: ContextManager, predicate) -> None:
    while not predicate():
        await context.changed()


async def write_notes(context: ContextManager, participants: list[str], text=note) -> None:
    for start in range(0, len(participants), 50):
        await asyncio.gather(
            *(
                context.update(
                    pid,
                    "notes",
                    ConversationContextUpdate(text(pid)),
                    mode="incremental",
                    timestamp_us=T0 + SECOND,
                )
                for pid in participants[start : start + 50]
            )
        )


async def test_a_participant_evicted_from_the_replica_cache_answers_from_its_notes():
    participants = [f"p{i}" for i in range(200)]
    with broker_process() as bus:
        sections = python("context_sections.py", bus, json.dumps(PLAN))
        try:
            await asyncio.to_thread(expect_line, sections, "ready")
            runtime = AgentRuntime(bus, name="conversation")
            context = ContextManager(OfflineLLM(), deployment="split", max_participants=64, **PLAN)
            runtime.register("context", context.subscriber())
            async with runtime:
                conversation = Conversation(
                    OfflineLLM(time_to_first_token_s=0, tokens_per_second=0),
                    context=context,
                    runtime=runtime,
                    output_topic=VOICE_OUTPUT_TOPIC,
                )
                await write_notes(context, participants)
                await context.synced()
                assert context.participants <= 64 and context.replicas_evicted > 0
                assert context.blocks("p1") == ()  # evicted: the host still holds its note

                async def started() -> None:
                    return None

                result = await conversation.answer(
                    AgentTurn(
                        "p1", "p1-t1", "Which cabinet holds the spare battery?", timestamp_us=T0
                    ),
                    started=started,
                )
                assert "C1-7" in result.response, result.response
                assert any(note("p1") in block.text for block in context.blocks("p1"))

                # concurrent fetches of one participant are one request to the host
                assert context.blocks("p2") == ()
                fetches = context.replica_fetches
                assert await asyncio.gather(context.ensure("p2"), context.ensure("p2")) == [
                    True,
                    True,
                ]
                assert context.replica_fetches == fetches + 1
                assert any(note("p2") in block.text for block in context.blocks("p2"))
                # a participant the replica holds whole is not fetched again
                assert await context.ensure("p2") is True
                assert context.replica_fetches == fetches + 1
                await conversation.close()
        finally:
            reap(sections)


LIMIT = 64 * 1024


def long_note(participant: str) -> str:
    return f"{note(participant)} " + "The shelf above it holds spare fuses and cables. " * 8


async def test_a_restarted_host_resyncs_a_replica_past_the_message_limit_and_show_works(
    tmp_path,
):
    config = default_config()
    edge_plan = {
        key: value
        for key, value in config.context.manager_kwargs().items()
        if key != "compaction_prompts"  # the defaults
    }
    plan = plan_of(config)
    edge_plan.update(
        namespace=plan.namespace,
        section_hosts=plan.section_hosts,
        compaction_workers=plan.compaction_workers,
    )
    host_args = json.dumps({**edge_plan, "max_message_bytes": LIMIT})
    journal = str(tmp_path / "context.sqlite3")
    participants = [f"p{i}" for i in range(400)]
    with broker_process("--max-message-bytes", str(LIMIT)) as bus:
        sections = python("context_sections.py", bus, host_args, journal)
        procs = [sections]
        try:
            await asyncio.to_thread(expect_line, sections, "ready")
            runtime = AgentRuntime(bus, name="conversation", max_message_bytes=LIMIT)
            context = ContextManager(OfflineLLM(), deployment="split", **edge_plan)
            runtime.register("context", context.subscriber())
            async with runtime:
                await write_notes(context, participants, long_note)
                await context.synced()
                expected = {pid: context.blocks(pid) for pid in participants}
                shown = sum(len(block.text) for blocks in expected.values() for block in blocks)
                assert shown > 2 * LIMIT  # one snapshot would not fit in a message

                sections.send_signal(signal.SIGKILL)
                sections.wait()
                resyncs = context.resyncs
                sections = python("context_sections.py", bus, host_args, journal)
                procs.append(sections)
                await asyncio.to_thread(expect_line, sections, "ready")
                await until(context, lambda: context.resyncs > resyncs)
                assert not context.resyncing
                assert {pid: context.blocks(pid) for pid in participants} == expected

            # `xrmq context show --participant p7`: the one participant, fetched alone
            out = io.StringIO()

            async def show_one(manager: ContextManager) -> int:
                assert manager.resyncs == 0 and manager.participants == 1
                return await show(manager, "p7", out)

            assert await with_manager(config, bus, show_one, timeout=20, participant="p7") == 0
            assert long_note("p7") in out.getvalue(), out.getvalue()
            # and from every host's paged snapshot (`xrmq context dump` starts so), and a
            # dump of everyone, read page by page
            assert await with_manager(config, bus, lambda m: show(m, "p8", out), timeout=20) == 0
            assert long_note("p8") in out.getvalue(), out.getvalue()
            dump = decode_dump(await with_manager(config, bus, lambda m: m.dump(), timeout=20))
            assert sorted(p.participant_id for p in dump.participants) == sorted(participants)
            assert all(
                long_note(p.participant_id) in entry.text
                for p in dump.participants
                for section in p.sections
                for entry in section.entries
            )
        finally:
            reap(*procs)


async def test_snapshot_pages_fit_the_limit_and_hold_each_participant_whole():
    """Pages of views and of dumps: each within ``page_bytes``, every participant in exactly
    one page with all its sections (dialogue and notes), together the whole snapshot."""
    page_bytes = 4096
    runtime = AgentRuntime(name="pages")
    context = ContextManager(OfflineLLM(), **PLAN)
    runtime.register("context", context.subscriber())
    participants = [f"p{i}" for i in range(60)]
    async with runtime:
        for pid in participants:
            context.record_exchange(
                pid, f"My locker is {pid}.", "Noted.", timestamp_us=T0, exchange_id=f"{pid}-t1"
            )
        await write_notes(context, participants, long_note)
        await context.synced()
        whole = await runtime.ask(
            context.plan.topics.host_sync(0), HostSync(), reply_type=HostViews, timeout=20
        )
        assert len(msgspec.msgpack.encode(whole)) > 4 * page_bytes

        async def pages(topic, reply_type) -> list:
            replies, after = [], None
            while True:
                page = await runtime.ask(
                    topic, HostSync(after=after, page_bytes=page_bytes), reply_type=reply_type
                )
                assert len(msgspec.msgpack.encode(page)) <= page_bytes
                replies.append(page)
                if page.next_after is None:
                    return replies
                after = page.next_after

        views = await pages(context.plan.topics.host_sync(0), HostViews)
        assert len(views) > 4
        owners = [{pid for pid, _ in page.views} for page in views]
        assert sum(len(owner) for owner in owners) == len(participants)  # none split
        assert set().union(*owners) == set(participants)
        paged = [item for page in views for item in page.views]
        assert len(paged) == len(whole.views) and set(paged) == set(whole.views)
        assert all(
            {view.section for pid, view in page.views if pid == owner} == {"dialogue", "notes"}
            for page in views
            for owner in {pid for pid, _ in page.views}
        )
        dumps = await pages(context.plan.topics.host_dump(0), HostDump)
        assert len(dumps) > 4
        dumped = [p.participant_id for page in dumps for p in page.participants]
        assert sorted(dumped) == sorted(participants)
        assert all(len(p.sections) == 2 for page in dumps for p in page.participants)
        await context.close()


class ScriptedHosts:
    """A running runtime's ``ask`` answered by ``answer(topic name, message)`` (an exception
    is raised), recording every ask: the section hosts as a replica sees them."""

    running = True
    max_message_bytes = LIMIT

    def __init__(self, answer) -> None:
        self.answer = answer
        self.asks: list[tuple[str, HostSync]] = []

    async def ask(self, topic, message, **_) -> object:
        self.asks.append((topic.name, message))
        result = self.answer(topic.name, message)
        if isinstance(result, BaseException):
            raise result
        return result

    def send(self, *_, **__) -> None:
        return None


def scene(pid: str, *, host: int = 0, epoch: int = 5, revision: int = 1) -> SectionView:
    block = ContextBlock(None, f"{pid} at bench {revision}.")
    return SectionView("scene", False, f"g-{pid}", revision, (block,), host=host, epoch=epoch)


def split_manager(**kwargs) -> ContextManager:
    return ContextManager(OfflineLLM(), deployment="split", **{**PLAN, **kwargs})


async def test_a_fetch_a_host_did_not_answer_shows_what_came_and_is_tried_again():
    context = split_manager(max_participants=2, section_hosts=2)
    for pid in ("p0", "p1", "p2"):
        context._on_view(pid, scene(pid))
    assert context.replicas_evicted == 1 and context.blocks("p0") == ()
    down = {1}

    def answer(topic: str, message: HostSync) -> object:
        host = int(topic.split(".")[-2])
        if host in down:
            return TimeoutError("no answer")
        views = (("p0", scene("p0", host=host)),) if host == 0 else ()
        return HostViews(host, 5, views)

    hosts = ScriptedHosts(answer)
    context._runtime = hosts  # the replica's view of the hosts
    assert await context.ensure("p0") is False  # host 1 did not answer: not whole
    assert [block.text for block in context.blocks("p0")] == ["p0 at bench 1."]
    down.clear()
    # a host that timed out is not waited for again at every turn ...
    assert await context.ensure("p0") is False
    assert [topic for topic, _ in hosts.asks[2:]] == [context.plan.topics.host_sync(0).name]
    # ... until it is heard from
    context._on_view("p9", scene("p9", host=1))
    assert await context.ensure("p0") is True  # tried again
    assert len(hosts.asks) == 5
    assert await context.ensure("p0") is True  # whole now: no ask
    assert len(hosts.asks) == 5
    assert all(message.participant_id == "p0" for _, message in hosts.asks)


def test_a_view_older_than_the_one_held_is_ignored():
    """A fetched snapshot's reply may be taken before a view that was published earlier."""
    replica = ParticipantReplica(complete=True)
    replica.apply_view(scene("p0", revision=3), "me")
    replica.apply_view(scene("p0", revision=2), "me")
    assert replica.topics["scene"].revision == 3
    replica.apply_view(scene("p0", epoch=6, revision=1), "me")  # a restarted host's: taken
    assert replica.topics["scene"].epoch == 6


async def test_a_host_restarted_between_pages_is_read_again_from_its_first_page():
    context = split_manager()
    context._on_view("p0", scene("p0", epoch=5))
    pages = {
        (5, None): HostViews(0, 5, (("p0", scene("p0", epoch=5)),), "p0"),
        (6, "p0"): HostViews(0, 6, (("p2", scene("p2", epoch=6)),)),  # restarted meanwhile
        (6, None): HostViews(0, 6, (("p1", scene("p1", epoch=6)),), "p1"),
        (6, "p1"): HostViews(0, 6, (("p2", scene("p2", epoch=6)),)),
    }
    epochs = iter([5, 6, 6, 6])

    hosts = ScriptedHosts(lambda _, message: pages[next(epochs), message.after])
    context._runtime = hosts  # the replica's view of the hosts
    await context._resync(0)
    assert [message.after for _, message in hosts.asks] == [None, "p0", None, "p1"]
    assert {message.page_bytes for _, message in hosts.asks} == {LIMIT}
    assert context.blocks("p0") == ()  # the restarted host no longer holds it
    assert [block.text for block in context.blocks("p1")] == ["p1 at bench 1."]
    assert context.resyncs == 1 and not context.resyncing
