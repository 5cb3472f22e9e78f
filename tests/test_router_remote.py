"""Remote destinations: a RemoteAgent proxy in one runtime, a DestinationServer in another,
on one bus. The router behaves as with the local agent."""

from __future__ import annotations

import asyncio
import threading
import time
from contextlib import asynccontextmanager

import pytest

from xrmq.actors.conversation import Conversation
from xrmq.actors.models import ModelError, ScriptedLLM, ScriptedResponse
from xrmq.actors.routing import AgentRouter, RemoteAnswerError, SingleDestination, remote, serve
from xrmq.actors.routing.remote_protocol import DestinationDied
from xrmq.actors.routing.remote_server import DestinationServer
from xrmq.actors.runtime import Agent, AgentRuntime, RuntimeClosedError
from xrmq.schemas import (
    Admission,
    AgentTurn,
    DestinationResult,
    Interrupted,
    ResponseOutput,
    RoutingAid,
    RuntimeMetrics,
    UserQuery,
)
from xrmq.schemas.routing import RouteSignal
from xrmq.topics import INTERRUPTED_TOPIC, METRICS_TOPIC, QUERY_TOPIC, VOICE_OUTPUT_TOPIC

from router_doubles import Destination, FakeContext, Finishing, Log, OutputRecorder


@asynccontextmanager
async def two_runtimes(front: AgentRuntime, back: AgentRuntime):
    """Start ``front`` (embedded broker) and ``back`` (a client of the same bus); stop both."""
    async with front:
        async with back:
            yield


def pair() -> tuple[AgentRuntime, AgentRuntime]:
    front = AgentRuntime(name="front")
    return front, AgentRuntime(front.address, name="back")


def turn(turn_id: str, text: str = "hello", participant: str = "p1") -> AgentTurn:
    return AgentTurn(participant, turn_id, text, timestamp_us=5)


async def test_a_remote_conversation_answers_with_the_routers_name_and_records_the_exchange():
    front, back = pair()
    recorder = front.register("recorder", OutputRecorder())
    context = FakeContext()
    conversation = Conversation(
        ScriptedLLM("At 15:30."), context=context, runtime=back, output_topic=VOICE_OUTPUT_TOPIC
    )
    back.register("conversation-server", serve("conversation", conversation))
    proxy = front.register("conversation-proxy", remote("conversation"))

    router = AgentRouter(
        {"lab-chat": proxy},
        SingleDestination(),
        query_topic=QUERY_TOPIC,
        output_topic=VOICE_OUTPUT_TOPIC,
        interrupted_topic=INTERRUPTED_TOPIC,
    )
    front.register("router", router)
    async with two_runtimes(front, back):
        query = front.send(QUERY_TOPIC, UserQuery("When?", 9), participant_id="p1")
        await recorder.wait_for(lambda frames: recorder.finals() == 1)
    assert [
        (source, frame.text, frame.request_id, frame.timestamp_us)
        for _, source, frame in recorder.frames
    ] == [
        ("lab-chat", "At", query, 9),
        ("lab-chat", " 15:30.", query, 9),
        ("lab-chat", "", query, 9),
    ]
    assert context.log == [("record", "p1", query)]


async def test_router_text_reaches_the_output_before_the_remote_reply():
    front, back = pair()
    recorder = front.register("recorder", OutputRecorder())
    log = Log()
    camera = Destination("camera", log, admissions=[Admission("accept", text="Let me look.")])

    async def answer(turn, *, started):
        await started()
        await back.publish(
            VOICE_OUTPUT_TOPIC,
            _reply(turn, "A spectrometer."),
            participant_id=turn.participant_id,
            source="camera",
        )
        return DestinationResult("A spectrometer.")

    camera.answer = answer
    back.register("camera-server", serve("camera", camera))
    proxy = front.register("camera-proxy", remote("camera"))
    front.register(
        "router",
        AgentRouter(
            {"camera": proxy},
            SingleDestination(),
            query_topic=QUERY_TOPIC,
            output_topic=VOICE_OUTPUT_TOPIC,
        ),
    )
    async with two_runtimes(front, back):
        front.send(QUERY_TOPIC, UserQuery("What is this?", 1), participant_id="p1")
        await recorder.wait_for(lambda frames: len(frames) == 3)
    assert [(source, frame.text) for _, source, frame in recorder.frames] == [
        ("router", "Let me look."),
        ("router", ""),
        ("camera", "A spectrometer."),
    ]


def _reply(turn, text):
    return ResponseOutput("reply", text, turn.turn_id)


async def test_the_remote_destination_publishes_nothing_until_the_routers_started_returns():
    front, back = pair()
    recorder = front.register("recorder", OutputRecorder())
    conversation = Conversation(
        ScriptedLLM("Hello there."),
        context=FakeContext(),
        runtime=back,
        output_topic=VOICE_OUTPUT_TOPIC,
    )
    back.register("server", serve("conversation", conversation))
    proxy = front.register("proxy", remote("conversation"))
    entered, gate = asyncio.Event(), asyncio.Event()

    async def started() -> None:
        entered.set()
        await gate.wait()
        await front.publish(
            VOICE_OUTPUT_TOPIC,
            _reply(turn("t1"), "Router first."),
            participant_id="p1",
            source="router",
        )

    async with two_runtimes(front, back):
        answering = asyncio.create_task(proxy.answer(turn("t1"), started=started))
        await entered.wait()
        assert recorder.frames == []
        gate.set()
        result = await answering
        await recorder.wait_for(lambda frames: recorder.finals() == 2)
    assert (result.response, result.focus) == ("Hello there.", None)
    assert result.stages is not None and result.stages.runtime == "back"  # its clock, carried
    assert [frame.text for _, _, frame in recorder.frames] == [
        "Router first.",
        "Hello",
        " there.",
        "",
    ]


async def test_admission_focus_release_and_departure_cross_the_bus():
    front, back = pair()
    log = Log()
    notes = Destination(
        "notes",
        log,
        aid=RoutingAid("Takes notes", keywords=("note",)),
        admissions=[Admission("accept", focus=True), Admission("decline")],
    )
    timer = Destination("timer", log, answers=[DestinationResult("Timer set.", focus="take")])
    back.register("notes-server", serve("notes", notes))
    proxy = front.register("notes-proxy", remote("notes"))

    async def output(turn, route, text):
        log.append(("say", route, turn.turn_id, text))

    class Choose:
        def __init__(self, *names):
            self.names = list(names)

        async def decide(self, turn, candidates):
            log.append(("decide", turn.turn_id, tuple(candidates)))
            return self.names.pop(0)

    router = AgentRouter({"notes": proxy, "timer": timer}, Choose("notes", "timer"), output=output)
    async with two_runtimes(front, back):
        assert await proxy.routing_aid("p1") == RoutingAid("Takes notes", keywords=("note",))
        await router.handle(turn("t1", "take a note"))
        # focused notes declines remotely, timer takes focus
        await router.handle(turn("t2", "set a timer"))
        await router.participant_left("p1")
    assert [entry for entry in log if entry[0] != "decide"] == [
        ("admit", "notes", "t1", False),
        ("answer", "notes", "t1", (), "notes"),
        ("started", "notes", "t1"),
        ("admit", "notes", "t2", True),
        ("admit", "timer", "t2", False),
        ("answer", "timer", "t2", ("t1",), "timer"),
        ("started", "timer", "t2"),
        ("release", "notes", "p1"),
        ("left", "notes", "p1"),
        ("left", "timer", "p1"),
    ]


async def test_cancelling_a_remote_answer_cancels_and_drains_it_before_returning():
    front, back = pair()
    log = Log()
    chat = Destination("chat", log, answers=["hang"])
    back.register("server", serve("chat", chat))
    proxy = front.register("proxy", remote("chat"))
    router = AgentRouter({"chat": proxy}, SingleDestination(), output=lambda *a: asyncio.sleep(0))
    async with two_runtimes(front, back):
        pending = asyncio.create_task(router.handle(turn("t1")))
        await chat.answering.wait()
        router.interrupt("p1")
        assert (await pending).status == "canceled"
        assert ("drained", "chat", "t1") in log  # the remote answer ended before the proxy returned


async def test_an_interruption_cuts_a_remote_conversation_and_the_next_turn_is_answered():
    front, back = pair()
    recorder = front.register("recorder", OutputRecorder())
    llm = ScriptedLLM(ScriptedResponse("A long story", hang=True), "Short.")
    context = FakeContext()
    conversation = Conversation(llm, context=context, runtime=back, output_topic=VOICE_OUTPUT_TOPIC)
    back.register("server", serve("conversation", conversation))
    proxy = front.register("proxy", remote("conversation"))
    front.register(
        "router",
        AgentRouter(
            {"conversation": proxy},
            SingleDestination(),
            query_topic=QUERY_TOPIC,
            output_topic=VOICE_OUTPUT_TOPIC,
            interrupted_topic=INTERRUPTED_TOPIC,
        ),
    )
    async with two_runtimes(front, back):
        front.send(QUERY_TOPIC, UserQuery("Tell me a story", 1), participant_id="p1")
        await recorder.wait_for(lambda frames: len(frames) == 3)
        await front.publish(INTERRUPTED_TOPIC, Interrupted(), participant_id="p1")
        await recorder.wait_for(lambda frames: recorder.finals() == 1)
        second = front.send(QUERY_TOPIC, UserQuery("Briefly?", 2), participant_id="p1")
        await recorder.wait_for(lambda frames: recorder.finals() == 2)
    assert [frame.text for _, _, frame in recorder.frames] == [
        "A",
        " long",
        " story",
        "",
        "Short.",
        "",
    ]
    assert [entry[2] for entry in context.log] == [second]
    assert llm.open_streams == 0


async def test_remote_failure_before_the_first_chunk_is_reported_by_the_router():
    front, back = pair()
    log = Log()
    llm = ScriptedLLM(ScriptedResponse(error=ModelError("scripted", "down")))
    conversation = Conversation(
        llm, context=FakeContext(), runtime=back, output_topic=VOICE_OUTPUT_TOPIC
    )
    back.register("server", serve("conversation", conversation))
    proxy = front.register("proxy", remote("conversation"))

    async def output(turn, route, text):
        log.append(("say", route, text))

    router = AgentRouter({"conversation": proxy}, SingleDestination(), output=output)
    async with two_runtimes(front, back):
        result = await router.handle(turn("t1"))
    assert result.status == "failed" and "down" in result.error
    assert log == [("say", "conversation", "Sorry, something went wrong. Please try again.")]


async def test_remote_failure_after_the_first_chunk_raises_remote_answer_error():
    front, back = pair()
    llm = ScriptedLLM(
        ScriptedResponse("one two", error=ModelError("scripted", "cut"), error_after_chunks=1)
    )
    conversation = Conversation(
        llm, context=FakeContext(), runtime=back, output_topic=VOICE_OUTPUT_TOPIC
    )
    back.register("server", serve("conversation", conversation))
    proxy = front.register("proxy", remote("conversation"))
    calls = []

    async def started() -> None:
        calls.append("started")

    async with two_runtimes(front, back):
        with pytest.raises(RemoteAnswerError, match="cut"):
            await proxy.answer(turn("t1"), started=started)
    assert calls == ["started"]


async def test_an_unreachable_destination_is_ineligible_and_its_answer_fails():
    front = AgentRuntime(name="front")
    proxy = front.register("proxy", remote("nobody", timeout_s=0.2))

    async def started() -> None: ...

    async with front:
        with pytest.raises(TimeoutError):
            await proxy.routing_aid("p1")
        with pytest.raises(RemoteAnswerError, match="not accepted"):
            await proxy.answer(turn("t1"), started=started)


async def test_a_proxy_that_is_not_registered_says_so():
    with pytest.raises(RuntimeClosedError, match="register it"):
        await remote("conversation").admit(turn("t1"), focused=False)


def test_serve_rejects_an_agent_that_is_not_routable():
    with pytest.raises(
        ValueError, match=r"DestinationServer.agents\['chat'\]: not a RoutableAgent"
    ):
        serve("chat", object())


def dying_stack(
    front: AgentRuntime, back: AgentRuntime, llm: ScriptedLLM, dead_after_s: float
) -> AgentRouter:
    """A router on ``front`` whose proxy watches the liveness of ``back``'s conversation."""
    conversation = Conversation(
        llm, context=FakeContext(), runtime=back, output_topic=VOICE_OUTPUT_TOPIC
    )
    back.register("server", serve("conversation", conversation))
    proxy = front.register(
        "proxy", remote("conversation", dead_after_s=dead_after_s, output_topic=VOICE_OUTPUT_TOPIC)
    )
    router = AgentRouter(
        {"conversation": proxy}, SingleDestination(), output=lambda *a: asyncio.sleep(0)
    )
    front.register("router", router)
    return router


async def test_a_silent_destination_fails_its_call_and_its_open_stream_gets_a_final_frame():
    front, back = pair()  # back publishes no heartbeat: once it stops streaming, it is silent
    recorder = front.register("recorder", OutputRecorder())
    llm = ScriptedLLM(ScriptedResponse("A long story", hang=True), "Short.")
    router = dying_stack(front, back, llm, 0.3)
    async with two_runtimes(front, back):
        result = await router.handle(turn("t1"))
        assert result.status == "failed" and "sent nothing for" in result.error
        streamed = [frame for _, _, frame in recorder.frames if frame.request_id == "t1"]
        await recorder.wait_for(lambda frames: recorder.finals() == 1)
        final = [(source, frame) for _, source, frame in recorder.frames if frame.final]
        closing = ResponseOutput(
            kind="reply", request_id="t1", response_id=streamed[0].response_id, final=True
        )
        assert final == [("conversation", closing)]
        assert [frame.text for frame in streamed[:3]] == ["A", " long", " story"]


async def test_a_destination_replaced_by_a_new_incarnation_fails_its_call_at_once():
    front, back = pair()
    recorder = front.register("recorder", OutputRecorder())
    llm = ScriptedLLM(ScriptedResponse("A long story", hang=True))
    router = dying_stack(front, back, llm, 30.0)
    proxy = front.agent("proxy")
    async with two_runtimes(front, back):
        pending = asyncio.create_task(router.handle(turn("t1")))
        await recorder.wait_for(lambda frames: len(frames) == 3)
        # The process restarted: a runtime of the same name with a newer epoch heartbeats
        # (once at start, the next one only in 30 s).
        async with AgentRuntime(front.address, name="back", metrics_interval=30):
            result = await asyncio.wait_for(pending, 10)  # long before dead_after_s (30 s)
            assert result.status == "failed" and "restarted" in result.error
            await recorder.wait_for(lambda frames: recorder.finals() == 1)
            # The new incarnation is up: the next request goes at once, it waits for nothing.
            assert (await proxy.routing_aid("p1")).description


class DeafToCancel(DestinationServer):
    """A server that no longer hears cancellations, as a destination that died mid-answer."""

    async def _on_signal(self, signal: RouteSignal, ctx) -> None:
        if signal.kind != "cancel":
            await super()._on_signal(signal, ctx)


async def test_a_cancelled_call_stops_draining_when_its_destination_dies():
    front, back = pair()  # back publishes no heartbeat: silent once its answer hangs
    log = Log()
    chat = Destination("chat", log, answers=["hang"])
    back.register("server", DeafToCancel("chat", chat))
    proxy = front.register("proxy", remote("chat", dead_after_s=0.3, drain_timeout_s=30))
    router = AgentRouter({"chat": proxy}, SingleDestination(), output=lambda *a: asyncio.sleep(0))
    async with two_runtimes(front, back):
        pending = asyncio.create_task(router.handle(turn("t1")))
        await chat.answering.wait()
        router.interrupt("p1")
        # Not after the 30 s drain timeout:
        assert (await asyncio.wait_for(pending, 10)).status == "canceled"
    assert ("drained", "chat", "t1") in log  # (when back stopped)


def test_the_proxy_checks_its_liveness_settings():
    with pytest.raises(ValueError, match="dead_after_s: must be positive"):
        remote("conversation", dead_after_s=0)
    with pytest.raises(ValueError, match="output_topic: must be a Topic carrying ResponseOutput"):
        remote("conversation", dead_after_s=1.0, output_topic=QUERY_TOPIC)
    assert DestinationDied.__mro__[1] is RemoteAnswerError


async def test_a_stopping_server_lets_the_answer_in_flight_finish_within_its_grace():
    front, back = pair()
    chat = Finishing()
    back.register("server", serve("chat", chat, shutdown_grace_s=30))
    proxy = front.register("proxy", remote("chat"))
    router = AgentRouter({"chat": proxy}, SingleDestination(), output=lambda *a: asyncio.sleep(0))
    async with front:
        await back.start()
        pending = asyncio.create_task(router.handle(turn("t1")))
        await chat.answering.wait()
        stopping = asyncio.create_task(back.stop())
        await asyncio.sleep(0)
        chat.finish.set()  # the answer ends while its process is stopping
        await stopping
        assert (await pending).status == "answered"
    with pytest.raises(ValueError, match="shutdown_grace_s: must be >= 0"):
        serve("chat", chat, shutdown_grace_s=-1)


class Heartbeats(Agent):
    """Sets ``beat`` on every heartbeat of runtime ``name``."""

    def __init__(self, name: str) -> None:
        self.watched = name
        self.beat = asyncio.Event()

    def handlers(self) -> dict:
        return {METRICS_TOPIC: self.on_metrics}

    async def on_metrics(self, metrics: RuntimeMetrics, ctx) -> None:
        if metrics.runtime == self.watched:
            self.beat.set()


class Backstage:
    """A destination runtime on a thread of its own (own event loop): it keeps heartbeating
    while the test's loop is stalled, as a destination in another process would."""

    def __init__(self, address, build) -> None:
        self.runtime = AgentRuntime(address, name="back", metrics_interval=0.05)
        build(self.runtime)
        self.ready = threading.Event()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._stop: asyncio.Event | None = None
        self._thread = threading.Thread(target=lambda: asyncio.run(self._main()), daemon=True)

    async def _main(self) -> None:
        self._loop, self._stop = asyncio.get_running_loop(), asyncio.Event()
        async with self.runtime:
            self.ready.set()
            await self._stop.wait()

    async def __aenter__(self) -> Backstage:
        self._thread.start()
        await asyncio.to_thread(self.ready.wait)
        return self

    async def __aexit__(self, *exc: object) -> None:
        assert self._loop is not None and self._stop is not None  # set before ready
        self._loop.call_soon_threadsafe(self._stop.set)
        await asyncio.to_thread(self._thread.join)


async def test_a_stall_of_the_routers_own_loop_is_not_taken_for_a_dead_destination():
    front = AgentRuntime(name="front")
    recorder = front.register("recorder", OutputRecorder())
    beats = front.register("beats", Heartbeats("back"))
    llm = ScriptedLLM(ScriptedResponse("A long story", hang=True))

    def build(back: AgentRuntime) -> None:
        conversation = Conversation(
            llm, context=FakeContext(), runtime=back, output_topic=VOICE_OUTPUT_TOPIC
        )
        back.register("server", serve("conversation", conversation))

    proxy = front.register(
        "proxy", remote("conversation", dead_after_s=0.3, output_topic=VOICE_OUTPUT_TOPIC)
    )
    router = AgentRouter(
        {"conversation": proxy}, SingleDestination(), output=lambda *a: asyncio.sleep(0)
    )
    async with front:
        async with Backstage(front.address, build):
            await beats.beat.wait()
            pending = asyncio.create_task(router.handle(turn("t1")))
            await recorder.wait_for(lambda frames: len(frames) == 3)
            # This loop stalls longer than dead_after_s; the destination heartbeats meanwhile.
            time.sleep(0.6)
            for _ in range(3):  # what it sent is read; more comes
                beats.beat.clear()
                await beats.beat.wait()
            assert not pending.done()
            router.interrupt("p1")
            assert (await pending).status == "canceled"  # not "failed": never taken for dead


async def test_after_a_death_the_next_requests_wait_for_the_destination_to_heartbeat_again():
    front, back = pair()  # back publishes no heartbeat: once it stops streaming, it is silent
    beats = front.register("beats", Heartbeats("back"))
    llm = ScriptedLLM(ScriptedResponse("A long story", hang=True), "Short.")
    router = dying_stack(front, back, llm, 0.3)
    proxy = front.agent("proxy")
    order: list[str] = []
    async with two_runtimes(front, back):
        assert (await router.handle(turn("t1"))).status == "failed"  # taken for dead
        aid = asyncio.create_task(proxy.routing_aid("p1"))
        aid.add_done_callback(lambda _: order.append("answered"))
        # back, restarted:
        async with AgentRuntime(front.address, name="back", metrics_interval=0.05):
            await beats.beat.wait()
            order.append("heartbeat")
            assert (await aid).description
            assert (await router.handle(turn("t2"))).status == "answered"
    assert order == ["heartbeat", "answered"]  # nothing was sent to a process that was not back


class Hung(DestinationServer):
    """A server whose process hangs mid-answer: asked for a call's status, it never answers."""

    async def _on_status(self, request, ctx):
        await asyncio.Event().wait()


async def test_without_heartbeats_a_destination_found_dead_is_asked_again_once_restarted():
    """Without ``dead_after_s`` nothing announces a restarted destination: the proxy must not
    wait for a heartbeat that never comes (every later turn failed after ``timeout_s``, the
    turn suite's 5 s warm-start turns); the next request probes it, and it answers."""
    front, back = pair()
    log = Log()
    back.register("server", Hung("chat", Destination("chat", log, answers=["hang"])))
    proxy = front.register("proxy", remote("chat", liveness_s=0.05, timeout_s=0.3))
    router = AgentRouter({"chat": proxy}, SingleDestination(), output=lambda *a: asyncio.sleep(0))
    front.register("router", router)
    async with front:
        async with back:
            result = await router.handle(turn("t1"))
            assert result.status == "failed" and "no reply to a status check" in result.error
        # back, restarted (a newer incarnation, no heartbeats): the next turn is answered
        restarted = AgentRuntime(front.address, name="back")
        restarted.register("server", serve("chat", Destination("chat", log)))
        async with restarted:
            assert (await router.handle(turn("t2"))).status == "answered"
            assert (await router.handle(turn("t3"))).status == "answered"


async def test_a_dead_destination_that_never_comes_back_fails_requests_after_the_timeout():
    front, back = pair()
    llm = ScriptedLLM(ScriptedResponse("A long story", hang=True))
    conversation = Conversation(
        llm, context=FakeContext(), runtime=back, output_topic=VOICE_OUTPUT_TOPIC
    )
    back.register("server", serve("conversation", conversation))
    proxy = front.register("proxy", remote("conversation", dead_after_s=0.3, timeout_s=0.5))
    router = AgentRouter(
        {"conversation": proxy}, SingleDestination(), output=lambda *a: asyncio.sleep(0)
    )
    async with two_runtimes(front, back):
        assert (await router.handle(turn("t1"))).status == "failed"
        with pytest.raises(TimeoutError, match="died and was not back within 0.5s"):
            await proxy.routing_aid("p1")
