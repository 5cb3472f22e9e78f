"""Superseding updates (``@superseding``): coalesced while queued, and taken after requests.

Issue 23, step 4: a turn's request is never queued behind a burst of section views in
the conversation's runtime. The views coalesce per (participant, section, host
incarnation) while they wait, with a count, and a request queued for an idle actor is
taken, with what its handler's first step scheduled (an answer's task), before the
queued views of another actor on the same event loop.

Deterministic: a burst reaches a mailbox while its actor is held on an event (through
the bus, ordered by a witness on the same sender's stream), or is offered to the
mailboxes in one synchronous step, exactly as the reader does within one drain.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import msgspec
import pytest

from xrmq.actors.context import ContextManager, register_sections
from xrmq.actors.context.messages import ForgetParticipant, SectionView
from xrmq.actors.models.offline import OfflineLLM
from xrmq.actors.runtime import Agent, AgentRuntime, subscribe, superseding
from xrmq.actors.runtime.mailbox import Mailbox
from xrmq.actors.runtime.superseding import RequestLane, request_lane, superseding_keys
from xrmq.schemas import ContextBlock, MessageMetadata
from xrmq.topics import Topic

pytestmark = [pytest.mark.timeout(30), pytest.mark.both_loops]


class State(msgspec.Struct, frozen=True):
    section: str
    revision: int


class Ping(msgspec.Struct, frozen=True):
    text: str


STATES = Topic("test.superseding.states", State)
MARKS = Topic("test.superseding.marks", Ping)
ASKS = Topic("test.superseding.asks", Ping)


class Replica(Agent):
    """Applies states; the state of section ``gate`` holds the handler until ``gate`` is set."""

    def __init__(self, log: list[str] | None = None) -> None:
        self.applied: list[tuple[str | None, str, int]] = []
        self.log = log if log is not None else []
        self.gate = asyncio.Event()
        self.holding = asyncio.Event()
        self.ended = asyncio.Event()

    @subscribe(STATES)
    @superseding(lambda state: state.section)
    async def on_state(self, state: State, ctx) -> None:
        if state.section == "gate":
            self.holding.set()
            await self.gate.wait()
            return
        self.applied.append((ctx.participant_id, state.section, state.revision))
        self.log.append(f"state {state.section} {state.revision}")
        if state.section == "end":
            self.ended.set()


class Witness(Agent):
    def __init__(self) -> None:
        self.seen = asyncio.Event()

    @subscribe(MARKS)
    async def on_mark(self, message: Ping, ctx) -> None:
        self.seen.set()


class Server(Agent):
    """Answers a request, and starts a follow-up task from it (as a destination starts the
    answer of a turn)."""

    def __init__(self, log: list[str]) -> None:
        self.log = log
        self.followed = asyncio.Event()
        self.noted = asyncio.Event()
        self.tasks: set[asyncio.Task[None]] = set()

    @subscribe(ASKS)
    async def on_ask(self, message: Ping, ctx) -> str:
        self.log.append(f"request {message.text}")
        if ctx.metadata.reply_to is None:
            self.noted.set()
        else:
            task = asyncio.create_task(self._follow(message.text))
            self.tasks.add(task)
            task.add_done_callback(self.tasks.discard)
        return message.text

    async def _follow(self, text: str) -> None:
        self.log.append(f"follow-up {text}")
        self.followed.set()


def _metadata(seq: int, participant: str | None = None, reply_to: str | None = None):
    return MessageMetadata(
        f"m{seq}",
        "test",
        "test-sender",
        1,
        seq,
        0,
        correlation_id=f"c{seq}",
        participant_id=participant,
        reply_to=reply_to,
    )


@asynccontextmanager
async def replica_held(replica: Replica) -> AsyncIterator[tuple[AgentRuntime, Witness]]:
    """A running runtime with ``replica`` held in its handler on the ``gate`` state and a
    ``Witness`` beside it (a mark it saw was read after all published before it)."""
    witness = Witness()
    runtime = AgentRuntime()
    runtime.register("replica", replica)
    runtime.register("witness", witness)
    async with runtime:
        await runtime.publish(STATES, State("gate", 0), participant_id="p1")
        await replica.holding.wait()
        yield runtime, witness


@asynccontextmanager
async def replica_held_server_idle() -> AsyncIterator[
    tuple[list[str], Replica, Server, Mailbox, Mailbox]
]:
    """A running runtime with a ``Server`` parked idle after one answered request (and the
    task it started) and a ``Replica`` held in its handler on the ``gate`` state, their
    shared log empty: (log, replica, server, the replica's mailbox, the server's)."""
    log: list[str] = []
    replica, server = Replica(log), Server(log)
    runtime = AgentRuntime()
    runtime.register("replica", replica)
    runtime.register("server", server)
    async with runtime:
        assert await runtime.ask(ASKS, Ping("warm"), reply_type=str) == "warm"  # parked, idle
        await server.followed.wait()
        server.followed.clear()
        log.clear()
        await runtime.publish(STATES, State("gate", 0), participant_id="p1")
        await replica.holding.wait()
        yield log, replica, server, runtime._agents["replica"], runtime._agents["server"]


def gate_then_request(replica: Replica, server: Server, requests) -> RequestLane:
    """One synchronous step, as one drain of the reader: the held updates' actor is woken
    first (its gate opens), then p1's request "turn" is queued for the idle server."""
    replica.gate.set()
    request = (server.on_ask, Ping("turn"), _metadata(9, "p1", "_inbox.nobody"), ASKS)
    assert requests.offer(request, False)
    return request_lane(asyncio.get_running_loop())


async def done(replica: Replica, server: Server) -> None:
    """Wait until the replica applied its "end" update and the server's follow-up ran."""
    await replica.ended.wait()
    await server.followed.wait()


async def test_queued_updates_of_one_key_coalesce_to_the_newest_in_place_with_a_count():
    replica = Replica()
    async with replica_held(replica) as (runtime, witness):
        burst = [("p1", "a", 1), ("p1", "a", 2), ("p1", "b", 1), ("p2", "a", 1)]
        burst += [("p1", "a", 3), ("p1", "b", 2), ("p2", "a", 2), ("p1", "a", 4)]
        for participant, section, revision in burst:
            await runtime.publish(STATES, State(section, revision), participant_id=participant)
        await runtime.publish(MARKS, Ping("after the burst"))
        await witness.seen.wait()  # the reader has queued the whole burst behind "gate"
        mailbox = runtime._agents["replica"]
        assert mailbox.depth == 3  # one slot per (participant, section)
        assert mailbox.coalesced == 5 and runtime.metrics().coalesced == 5
        await runtime.publish(STATES, State("end", 1), participant_id="p1")
        replica.gate.set()
        await replica.ended.wait()
    # each key's newest, in the place of its first queued update; nothing else handled
    assert replica.applied == [("p1", "a", 4), ("p1", "b", 2), ("p2", "a", 2), ("p1", "end", 1)]


async def test_a_request_for_an_idle_actor_is_taken_before_queued_updates_of_another():
    """The updates' actor is scheduled first (its gate opens first), yet the request, and the
    task its handler started, run before any queued update of another participant: the
    request lane."""
    async with replica_held_server_idle() as (log, replica, server, updates, requests):
        for seq, section in enumerate(("a", "b", "c", "end"), start=1):
            update = (replica.on_state, State(section, 1), _metadata(seq, "p2"), STATES)
            assert updates.offer(update)
        assert requests.idle
        lane = gate_then_request(replica, server, requests)
        assert lane.held == 1
        await done(replica, server)
        assert lane.held == 0
    states = ["state a 1", "state b 1", "state c 1", "state end 1"]
    assert log == ["request turn", "follow-up turn", *states]


async def test_a_participants_own_queued_updates_are_applied_before_its_request():
    """A view read before the participant's own request is applied first: its turn must not
    be answered from the context as it was before a view its asker had already seen. Other
    participants' updates still wait."""
    async with replica_held_server_idle() as (log, replica, server, updates, requests):
        for seq, section in enumerate(("mine", "end"), start=1):
            update = (replica.on_state, State(section, 1), _metadata(seq, "p1"), STATES)
            assert updates.offer(update)
        lane = gate_then_request(replica, server, requests)
        assert lane.held == 1 and lane.holds_for("p1") and not lane.holds_for("p2")
        await done(replica, server)
        assert lane.held == 0 and not lane.holds_for("p1")
    assert log.index("state mine 1") < log.index("request turn")


async def test_a_participants_own_update_queued_behind_anothers_is_applied_before_its_request():
    """The participant's own view behind another participant's still goes before its request
    (taken ahead of the other's, as a coalesced update takes its first one's place); the
    other's waits for the request, as above."""
    async with replica_held_server_idle() as (log, replica, server, updates, requests):
        for seq, (participant, section) in enumerate(
            (("p2", "other"), ("p1", "mine"), ("p2", "end")), start=1
        ):
            update = (replica.on_state, State(section, 1), _metadata(seq, participant), STATES)
            assert updates.offer(update)
        gate_then_request(replica, server, requests)
        await done(replica, server)
    states = ["state other 1", "state end 1"]
    assert log == ["state mine 1", "request turn", "follow-up turn", *states]


async def test_a_participants_own_update_behind_a_plain_delivery_is_applied_in_order_first():
    """An update is never taken ahead of a plain delivery queued before it: the mailbox then
    goes on in order, without waiting, until the participant's update is applied."""
    async with replica_held_server_idle() as (log, replica, server, updates, requests):
        queued = [
            (replica.on_state, State("other", 1), _metadata(1, "p2"), STATES),
            # a request to the busy replica: a plain delivery in its queue, which holds nothing
            (replica.on_state, State("plain", 1), _metadata(2, "p3", "_inbox.nobody"), STATES),
            (replica.on_state, State("mine", 1), _metadata(3, "p1"), STATES),
            (replica.on_state, State("end", 1), _metadata(4, "p2"), STATES),
        ]
        for delivery in queued:
            assert updates.offer(delivery)
        lane = gate_then_request(replica, server, requests)
        assert lane.held == 1
        await done(replica, server)
    assert log.index("state other 1") < log.index("state plain 1") < log.index("state mine 1")
    assert log.index("state mine 1") < log.index("request turn")


async def test_a_request_started_in_the_reader_lets_its_participants_waiting_updates_go_first():
    """Updates already waiting for another participant's request look again when a request
    starts in the reader (the first of its drain): its participant's update is applied
    before the task its handler started, the other participant's after it."""
    log: list[str] = []
    replica, first, second = Replica(log), Server(log), Server(log)
    runtime = AgentRuntime()
    runtime.register("replica", replica)
    runtime.register("first", first)
    runtime.register("second", second)
    loop = asyncio.get_running_loop()
    async with runtime:
        await runtime.ask(ASKS, Ping("warm"), reply_type=str)
        await first.followed.wait()
        await second.followed.wait()
        first.followed.clear()
        second.followed.clear()
        log.clear()
        updates = runtime._agents["replica"]
        await runtime.publish(STATES, State("gate", 0), participant_id="p1")
        await replica.holding.wait()
        for seq, (participant, section) in enumerate(
            (("p2", "other"), ("p1", "mine"), ("p2", "end")), start=1
        ):
            update = (replica.on_state, State(section, 1), _metadata(seq, participant), STATES)
            assert updates.offer(update)
        lane = request_lane(loop)

        def reader_starts_a_request() -> None:  # a later drain: its first message, a request
            assert lane.held == 1 and not lane.holds_for("p1")  # p3's, with the updates waiting
            turn = (second.on_ask, Ping("one"), _metadata(9, "p1", "_inbox.nobody"), ASKS)
            assert runtime._agents["second"].offer(turn, True)

        # one synchronous step: the updates' actor is woken and will wait for p3's request;
        # the reader's next drain starts p1's request while that request still holds the lane
        replica.gate.set()
        turn = (first.on_ask, Ping("three"), _metadata(8, "p3", "_inbox.nobody"), ASKS)
        assert runtime._agents["first"].offer(turn, False)
        loop.call_soon(reader_starts_a_request)
        await replica.ended.wait()
        await first.followed.wait()
        await second.followed.wait()
        assert lane.held == 0
    assert log.index("state mine 1") < log.index("follow-up one") < log.index("state other 1")


async def test_a_one_way_message_takes_no_lane_and_queued_updates_keep_their_turn():
    """The control of the test above: the same step with a one-way message instead of a
    request runs in plain wake-up order, the updates first."""
    async with replica_held_server_idle() as (log, replica, server, updates, requests):
        for seq, section in enumerate(("a", "end"), start=1):
            update = (replica.on_state, State(section, 1), _metadata(seq, "p1"), STATES)
            assert updates.offer(update)
        replica.gate.set()
        assert requests.offer((server.on_ask, Ping("note"), _metadata(9, "p1"), ASKS), False)
        assert request_lane(asyncio.get_running_loop()).held == 0
        await replica.ended.wait()
        await server.noted.wait()
    assert log == ["state a 1", "state end 1", "request note"]


class Busy(Agent):
    def __init__(self) -> None:
        self.release = asyncio.Event()
        self.busy = asyncio.Event()

    @subscribe(ASKS)
    async def on_ask(self, message: Ping, ctx) -> str:
        if message.text == "busy":
            self.busy.set()
            await self.release.wait()
        return message.text


async def test_a_request_for_a_busy_actor_holds_nothing_and_a_stopped_holder_releases():
    busy = Busy()
    runtime = AgentRuntime()
    runtime.register("busy", busy)
    async with runtime:
        await runtime.ask(ASKS, Ping("warm"), reply_type=str)
        lane = request_lane(asyncio.get_running_loop())
        mailbox = runtime._agents["busy"]
        held = asyncio.create_task(runtime.ask(ASKS, Ping("busy"), reply_type=str))
        await busy.busy.wait()
        # started in the reader, the request holds the lane for its first step and what that
        # scheduled (released by a callback queued then, so before this one)
        assert lane.held == 1
        loop = asyncio.get_running_loop()
        passed = loop.create_future()
        loop.call_soon(passed.set_result, None)
        await passed
        assert lane.held == 0
        # behind the actor's own handler: it waits for its actor, not for updates elsewhere
        assert mailbox.offer((busy.on_ask, Ping("queued"), _metadata(1, None, "_inbox.x"), ASKS))
        assert lane.held == 0
        busy.release.set()
        assert await held == "busy"  # the worker replied, took "queued" and parked in one step
        assert mailbox.idle
        assert mailbox.offer((busy.on_ask, Ping("held"), _metadata(2, None, "_inbox.x"), ASKS))
        assert lane.held == 1
        await mailbox.stop()  # it will never take the request: the hold goes with it
        assert lane.held == 0


def _view(section: str, revision: int, epoch: int, text: str) -> SectionView:
    return SectionView(
        section, False, "g1", revision, (ContextBlock(1_000 + revision, text),), host=0, epoch=epoch
    )


async def test_a_context_replica_applies_the_newest_queued_view_of_a_section_once():
    """The conversation's replica (``ContextSubscriber.on_view``) is superseding per
    (participant, section, host, epoch): a burst of one section's views is applied as its
    newest, the manager renders it, and a view of another epoch is never folded into one of
    the host's earlier incarnation (the replica must see both to ignore the stale one)."""
    manager = ContextManager(OfflineLLM(), incremental_context_topics=["notes"], deployment="split")
    host = AgentRuntime()  # the replica's section host 0, answering its resync at start
    register_sections(host, manager.plan)
    runtime = AgentRuntime(host.address)
    subscriber = runtime.register("context", manager.subscriber())
    key = superseding_keys(type(subscriber))[type(subscriber).on_view]
    assert key(_view("notes", 1, 7, "x")) == key(_view("notes", 2, 7, "y"))
    assert key(_view("notes", 1, 7, "x")) != key(_view("notes", 1, 8, "x"))
    assert key(_view("notes", 1, 7, "x")) != key(_view("other", 1, 7, "x"))
    topics = manager.plan.topics
    async with host, runtime:
        # answered: the replica's task is parked, idle
        forget = ForgetParticipant(())
        assert await runtime.ask(topics.replica(manager.id), forget, participant_id="p0")
        mailbox = runtime._agents["context"]
        assert mailbox.idle
        changed = asyncio.create_task(manager.changed())
        for revision in (1, 2, 3):  # as host 0 publishes them, in this incarnation
            view = _view("notes", revision, host.epoch, f"revision {revision}")
            delivery = (subscriber.on_view, view, _metadata(revision, "p1"), topics.view)
            assert mailbox.offer(delivery)
        assert mailbox.depth == 1 and mailbox.coalesced == 2
        await changed
        assert mailbox.depth == 0
        assert [block.text for block in manager.blocks("p1")] == ["revision 3"]
        assert runtime.metrics().coalesced == 2


class BadKeys(Replica):
    """Its key is unhashable for a negative revision."""

    @subscribe(STATES)
    @superseding(lambda state: state.section if state.revision >= 0 else [state.section])  # type: ignore[arg-type, return-value]  # unhashable on purpose
    async def on_state(self, state: State, ctx) -> None:
        await super().on_state(state, ctx)


async def test_an_update_whose_key_fails_is_delivered_as_it_is_and_counted_as_a_fault():
    replica = BadKeys()
    async with replica_held(replica) as (runtime, witness):
        for revision in (-1, -2, 1, 2):
            await runtime.publish(STATES, State("a", revision), participant_id="p1")
        await runtime.publish(MARKS, Ping("after"))
        await witness.seen.wait()
        await runtime.publish(STATES, State("end", 1), participant_id="p1")
        replica.gate.set()
        await replica.ended.wait()
        metrics = runtime.metrics()
    assert replica.applied == [("p1", "a", -1), ("p1", "a", -2), ("p1", "a", 2), ("p1", "end", 1)]
    assert metrics.actor_faults == {"replica": 2} and metrics.coalesced == 1
