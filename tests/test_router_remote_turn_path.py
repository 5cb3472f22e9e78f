"""Issue 23: a remotely served turn crosses the broker at most four times before its first
chunk; routing aids are published and cached, admission and answer are one request, and
peers of another protocol version are refused clearly."""

from __future__ import annotations

import asyncio
import threading

import msgspec
import pytest

from xrmq.actors.conversation import Conversation
from xrmq.actors.models import OfflineLLM
from xrmq.actors.routing import AgentRouter, SingleDestination, remote, serve
from xrmq.actors.routing.destination import RoutingTurnContext, routed_turn
from xrmq.actors.routing.remote_protocol import DestinationTopics, RemoteProtocolError
from xrmq.actors.runtime import Agent, AgentRuntime, AskError
from xrmq.schemas import Admission, AgentTurn, DestinationResult, RoutingAid, UserQuery
from xrmq.schemas.routing import RouteAidAsk, RouteAids, RouteRequest
from xrmq.topics import QUERY_TOPIC, VOICE_OUTPUT_TOPIC, Topic

from bench.bus_workers import raw_sockets
from bench.turn_tap import Tally
from buses import broker_process
from router_doubles import Destination, FakeContext, Log, OutputRecorder


def turn(turn_id: str, participant: str = "p1") -> AgentTurn:
    return AgentTurn(participant, turn_id, "hello", timestamp_us=5)


def pair() -> tuple[AgentRuntime, AgentRuntime]:
    front = AgentRuntime(name="front")
    return front, AgentRuntime(front.address, name="back")


async def until(predicate, passes: int = 1000) -> None:
    """Let the loop run (no timer) until ``predicate()``: for in-process deliveries."""
    for _ in range(passes):
        if predicate():
            return
        await asyncio.sleep(0)
    raise AssertionError("the condition never held")


class Watch(Agent):
    """Records every message on ``topic`` and sets ``seen`` for each."""

    def __init__(self, topic: Topic) -> None:
        self.topic = topic
        self.messages: list = []
        self.seen = asyncio.Event()

    def handlers(self) -> dict:
        return {self.topic: self.on_message}

    async def on_message(self, message, ctx) -> None:
        self.messages.append(message)
        self.seen.set()


@pytest.mark.timeout(60)
async def test_a_remote_turn_crosses_the_broker_four_times_before_its_first_chunk():
    with broker_process() as bus:
        _, sub = raw_sockets(
            bus,
            QUERY_TOPIC.name.encode() + b"\x00",
            b"route.",
            b"_inbox.",
            VOICE_OUTPUT_TOPIC.name.encode() + b"\x00",
        )
        tally = Tally()
        stop = threading.Event()

        def read() -> None:
            while not stop.is_set():
                if sub.poll(20):
                    tally.observe(sub.recv_multipart())

        reader = threading.Thread(target=read, daemon=True)
        reader.start()
        try:
            front = AgentRuntime(bus, name="front")
            back = AgentRuntime(bus, name="back")
            recorder = front.register("recorder", OutputRecorder())
            conversation = Conversation(
                OfflineLLM(time_to_first_token_s=0, tokens_per_second=0),
                context=FakeContext(),
                runtime=back,
                output_topic=VOICE_OUTPUT_TOPIC,
            )
            back.register("server", serve("conversation", conversation))
            proxy = front.register("proxy", remote("conversation"))
            front.register(
                "router",
                AgentRouter(
                    {"conversation": proxy},
                    SingleDestination(),
                    query_topic=QUERY_TOPIC,
                    output_topic=VOICE_OUTPUT_TOPIC,
                ),
            )
            async with back, front:
                for count in (1, 2, 3):
                    front.send(QUERY_TOPIC, UserQuery("Hello?", 1), participant_id="p1")
                    await recorder.wait_for(lambda frames, n=count: recorder.finals() == n)
                # filled by the reader thread: waited for there, not in loop passes
                assert await asyncio.to_thread(tally.wait_done, 3, 20)
        finally:
            stop.set()
            reader.join()
            sub.close()
    first, *later = tally.done
    assert first == 6  # the query, the aid ask and its reply, the turn, its outcome, the chunk
    assert later == [4, 4]  # the aid is cached: the query, the turn, its outcome, the chunk
    assert proxy.aid_asks == 1


async def test_routing_aids_are_asked_once_then_published_when_they_change():
    front, back = pair()
    notes = Destination("notes", Log(), aid=RoutingAid("Takes notes"))
    server = back.register("server", serve("notes", notes, aid_check_s=0.05))
    proxy = front.register("proxy", remote("notes"))
    published = front.register("watch", Watch(server.topics.aids))
    async with front, back:
        assert await proxy.routing_aid("p1") == RoutingAid("Takes notes")
        assert await proxy.routing_aid("p1") == RoutingAid("Takes notes")
        assert proxy.aid_asks == 1
        notes.aid = RoutingAid("Takes notes", eligible=False)
        server.routing_aid_changed("p1")
        await published.seen.wait()
        update = published.messages[-1]
        assert isinstance(update, RouteAids) and update.aid == notes.aid and update.version == 2
        await until(lambda: proxy._aids["p1"].version == 2)
        assert (await proxy.routing_aid("p1")).eligible is False
        published.seen.clear()
        notes.aid = RoutingAid("Takes notes again")  # a change the agent announces to nobody
        await published.seen.wait()  # the periodic check (aid_check_s) publishes it
        assert published.messages[-1].aid == RoutingAid("Takes notes again")
        await until(lambda: proxy._aids["p1"].version == 3)
        assert await proxy.routing_aid("p1") == RoutingAid("Takes notes again")
        assert proxy.aid_asks == 1


async def test_a_cached_aid_is_not_used_once_its_destination_went_silent():
    front, back = pair()  # no heartbeats: the destination counts as heard only by its messages
    notes = Destination("notes", Log())
    back.register("server", serve("notes", notes))
    proxy = front.register("proxy", remote("notes", liveness_s=0.05))
    async with front, back:
        await proxy.routing_aid("p1")
        silent = asyncio.get_running_loop().time()
        await until(lambda: asyncio.get_running_loop().time() - silent > 0.05, passes=10**7)
        await proxy.routing_aid("p1")
    assert proxy.aid_asks == 2


class Hanging:
    """A destination whose answers run until cancelled; ``cancelled`` is set when one was."""

    def __init__(self) -> None:
        self.answering = asyncio.Event()
        self.cancelled = asyncio.Event()

    def routing_aid(self, participant_id: str) -> RoutingAid:
        return RoutingAid("hangs")

    async def admit(self, turn: AgentTurn, *, focused: bool) -> Admission:
        return Admission("accept")

    async def answer(self, turn: AgentTurn, *, started) -> DestinationResult:
        await started()
        self.answering.set()
        try:
            await asyncio.Event().wait()
        except asyncio.CancelledError:
            self.cancelled.set()
            raise
        return DestinationResult()

    async def release(self, participant_id: str) -> None: ...

    async def participant_left(self, participant_id: str) -> None: ...


async def test_an_admitted_turn_is_answering_already_and_is_cancelled_if_never_answered():
    front, back = pair()
    agent = Hanging()
    back.register("server", serve("chat", agent))
    proxy = front.register("proxy", remote("chat"))
    ends = front.register("ends", Watch(proxy.events))
    async with front, back:

        async def admit_only() -> Admission:
            routed = RoutingTurnContext("chat", "p1", "t1", False, started_work=False)
            with routed_turn(routed):  # as a router admits: its started() has no work
                admission = await proxy.admit(turn("t1"), focused=False)
            await agent.answering.wait()  # answering since the admission, before any answer()
            return admission

        assert await asyncio.create_task(admit_only()) == Admission("accept")
        await ends.seen.wait()  # the turn ended without answer(): its call was cancelled
        assert [event.kind for event in ends.messages] == ["cancelled"]
        assert ends.messages[0].began  # it had reached started(): it was answering
        assert agent.cancelled.is_set()
        assert proxy._calls == {} and proxy._admitted == {}


async def test_a_decline_and_a_clarify_come_back_as_the_outcome_and_start_nothing():
    front, back = pair()
    log = Log()
    chat = Destination(
        "chat", log, admissions=[Admission("decline"), Admission("clarify", text="Which one?")]
    )
    back.register("server", serve("chat", chat))
    proxy = front.register("proxy", remote("chat"))
    said = []

    async def output(turn, route, text):
        said.append(text)

    router = AgentRouter({"chat": proxy}, SingleDestination(), output=output)
    async with front, back:
        declined = await router.handle(turn("t1"))
        clarified = await router.handle(turn("t2"))
    assert declined.status == "unanswered" and "declined" in declined.error
    assert clarified.status == "clarified" and said[-1] == "Which one?"
    assert [entry[0] for entry in log] == ["admit", "admit"]  # no answer ran


async def test_a_protocol_1_proxy_is_refused_naming_both_versions():
    # A protocol-1 proxy asks with an empty map (RouteRequest): read as protocol 1.
    old_ask = msgspec.msgpack.decode(msgspec.msgpack.encode(RouteRequest()), type=RouteAidAsk)
    assert old_ask == RouteAidAsk(1)
    front, back = pair()
    server = back.register("server", serve("chat", Destination("chat", Log())))
    async with front, back:
        with pytest.raises(AskError, match="speaks route protocol 2, the asking proxy 1"):
            await front.ask(server.topics.aid, old_ask, participant_id="p1", timeout=5)
        # a peer's mistake: counted as a refusal, not as a fault of the server's actor
        assert server.protocol_refusals == 1 and back.metrics().faults == 0


class OldServer(Agent):
    """A protocol-1 destination: its aid reply is a bare RoutingAid."""

    def handlers(self) -> dict:
        return {DestinationTopics.of("chat").aid: self.on_aid}

    async def on_aid(self, request: RouteAidAsk, ctx) -> RoutingAid:
        return RoutingAid("old")


async def test_a_protocol_1_destination_fails_the_proxy_clearly_and_is_ineligible():
    front, back = pair()
    back.register("old", OldServer())
    proxy = front.register("proxy", remote("chat"))
    said = []

    async def output(turn, route, text):
        said.append(text)

    router = AgentRouter({"chat": proxy}, SingleDestination(), output=output)
    async with front, back:
        with pytest.raises(RemoteProtocolError, match="not route protocol 2"):
            await proxy.routing_aid("p1")
        result = await router.handle(turn("t1"))
    assert result.status == "unanswered"
    assert "RemoteProtocolError" in result.error and "older xrmq" in result.error
