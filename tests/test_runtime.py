"""Actor semantics of AgentRuntime on the embedded bus (and a broker process for losses)."""

from __future__ import annotations

import asyncio

import pytest

from xrmq.actors.runtime import Agent, AgentRuntime, AskError, RuntimeClosedError, subscribe
from xrmq.schemas import ConversationContextUpdate as Update
from xrmq.schemas import RuntimeMetrics, UserQuery
from xrmq.topics import METRICS_TOPIC, Topic, context_topic

from buses import broker_process
from raw_client import RawClient

pytestmark = [pytest.mark.timeout(30), pytest.mark.both_loops]

NOTES = context_topic("notes")
NOTES2 = context_topic("notes2")


class Recorder(Agent):
    """Records (text, participant) per topic; sets an event when ``expected`` arrived."""

    def __init__(self, expected: int = 1) -> None:
        self.seen: list[tuple[str, str | None]] = []
        self.expected = expected
        self.done = asyncio.Event()

    def _record(self, message, ctx) -> None:
        self.seen.append((message.text, ctx.participant_id))
        if len(self.seen) >= self.expected:
            self.done.set()

    @subscribe(NOTES)
    async def on_notes(self, message, ctx) -> None:
        self._record(message, ctx)


class Notes2Recorder(Recorder):
    @subscribe(NOTES2)
    async def on_notes2(self, message, ctx) -> None:
        self._record(message, ctx)


async def test_a_topic_never_receives_a_topic_whose_name_it_prefixes():
    notes_only, both = Recorder(), Notes2Recorder(expected=2)
    runtime = AgentRuntime()
    runtime.register("notes-only", notes_only)
    runtime.register("both", both)
    async with runtime:
        await runtime.publish(NOTES2, Update("for notes2"))
        await runtime.publish(NOTES, Update("for notes"))
        await both.done.wait()
        await notes_only.done.wait()
    assert notes_only.seen == [("for notes", None)]
    assert sorted(both.seen) == [("for notes", None), ("for notes2", None)]


async def test_participant_filtered_agent_receives_only_its_participant_and_global_messages():
    filtered, everyone = Recorder(expected=2), Recorder(expected=4)
    runtime = AgentRuntime()
    runtime.register("filtered", filtered, participant_id="p2")
    runtime.register("everyone", everyone)
    async with runtime:
        for pid in ("p1", "p2", "p3", None):
            await runtime.publish(NOTES, Update(f"hi {pid}"), participant_id=pid)
        await everyone.done.wait()
        await filtered.done.wait()
    assert filtered.seen == [("hi p2", "p2"), ("hi None", None)]


class Gate(Agent):
    """Blocks in its handler until released; tracks how many handlers run at once."""

    def __init__(self) -> None:
        self.active = 0
        self.max_active = 0
        self.entered = asyncio.Event()
        self.release = asyncio.Event()
        self.handled: list[str] = []
        self.third_handled = asyncio.Event()

    @subscribe(NOTES)
    async def on_notes(self, message, ctx) -> None:
        self.active += 1
        self.max_active = max(self.max_active, self.active)
        self.entered.set()
        await self.release.wait()
        self.handled.append(message.text)
        self.active -= 1
        if len(self.handled) == 3:
            self.third_handled.set()


async def test_an_actor_handles_one_message_at_a_time():
    gate, witness = Gate(), Recorder(expected=3)
    runtime = AgentRuntime()
    runtime.register("gate", gate)
    runtime.register("witness", witness)
    async with runtime:
        for text in ("a", "b", "c"):
            await runtime.publish(NOTES, Update(text))
        await witness.done.wait()  # all three were dispatched to both mailboxes
        await gate.entered.wait()
        assert gate.active == 1 and runtime.metrics().actors["gate"] == 2
        gate.release.set()
        await gate.third_handled.wait()
    assert gate.max_active == 1
    assert gate.handled == ["a", "b", "c"]


async def test_a_full_mailbox_counts_and_refuses_overflow():
    gate, witness = Gate(), Recorder(expected=5)
    runtime = AgentRuntime()
    runtime.register("gate", gate, mailbox_capacity=2)
    runtime.register("witness", witness)
    async with runtime:
        await runtime.publish(NOTES, Update("first"))
        await gate.entered.wait()  # the first message is being handled, the mailbox is empty
        for text in ("2", "3", "4", "5"):
            await runtime.publish(NOTES, Update(text))
        await witness.done.wait()
        stats = runtime.metrics()
        gate.release.set()
    assert stats.overflow == 2
    assert stats.actors["gate"] == 2


class Section(Agent):
    instances: list[Section] = []

    def __init__(self, key: str) -> None:
        self.key = key
        self.texts: list[str] = []
        self.started = False
        Section.instances.append(self)

    async def on_start(self) -> None:
        self.started = True

    @subscribe(NOTES)
    async def on_notes(self, message, ctx) -> int:
        assert ctx.participant_id in (None, self.key)
        self.texts.append(message.text)
        return len(self.texts)


async def test_keyed_actors_spawn_one_instance_per_key_on_first_message():
    Section.instances = []
    runtime = AgentRuntime()
    runtime.register_keyed("section", Section)
    async with runtime:
        assert await runtime.ask(NOTES, Update("one"), participant_id="p1", reply_type=int) == 1
        assert await runtime.ask(NOTES, Update("two"), participant_id="p2", reply_type=int) == 1
        assert await runtime.ask(NOTES, Update("three"), participant_id="p1", reply_type=int) == 2
        instances = runtime.keyed_instances("section")
        assert sorted(instances) == ["p1", "p2"]
        assert instances["p1"].texts == ["one", "three"] and instances["p2"].texts == ["two"]
        assert all(section.started for section in Section.instances)
        assert await runtime.retire("section", "p1")
        assert sorted(runtime.keyed_instances("section")) == ["p2"]


async def test_keyed_kind_in_a_runtime_ignores_keys_of_other_shards():
    from xrmq.actors.runtime import shard_of

    runtime = AgentRuntime()
    runtime.register_keyed("section", Section, shard=0, shards=2)
    keys = [f"k{i}" for i in range(10)]
    mine = [k for k in keys if shard_of(k, 2) == 0]
    theirs = [k for k in keys if shard_of(k, 2) == 1]
    assert mine and theirs
    async with runtime:
        for key in mine:
            await runtime.ask(NOTES, Update("x"), participant_id=key, reply_type=int)
        with pytest.raises(TimeoutError):
            await runtime.ask(
                NOTES, Update("x"), participant_id=theirs[0], reply_type=int, timeout=0.2
            )
        assert sorted(runtime.keyed_instances("section")) == sorted(mine)


class Echo(Agent):
    def __init__(self) -> None:
        self.hold = asyncio.Event()
        self.holding = asyncio.Event()

    @subscribe(NOTES)
    async def on_notes(self, message, ctx) -> str:
        if message.text == "fail":
            raise RuntimeError("bad request")
        if message.text == "hold":
            self.holding.set()
            await self.hold.wait()
        return message.text.upper()


async def test_ask_returns_the_handlers_return_value():
    runtime = AgentRuntime()
    runtime.register("echo", Echo())
    async with runtime:
        assert await runtime.ask(NOTES, Update("hello"), reply_type=str) == "HELLO"


async def test_an_ask_is_in_flight_in_the_metrics_until_its_reply_arrives():
    echo = Echo()
    runtime = AgentRuntime()
    runtime.register("echo", echo)
    async with runtime:
        assert runtime.metrics().tables["asks_in_flight"] == 0
        asked = asyncio.ensure_future(runtime.ask(NOTES, Update("hold"), reply_type=str))
        await echo.holding.wait()
        assert runtime.metrics().tables["asks_in_flight"] == 1
        echo.hold.set()
        assert await asked == "HOLD"
        assert runtime.metrics().tables["asks_in_flight"] == 0


async def test_request_sends_before_it_returns_and_its_task_is_the_reply():
    runtime = AgentRuntime()
    runtime.register("echo", Echo())
    async with runtime:
        published = runtime.metrics().published
        asked = runtime.request(NOTES, Update("now"), reply_type=str)
        # handed to the bus and in flight already, before the caller yields once
        assert runtime.metrics().published == published + 1
        assert runtime.metrics().tables["asks_in_flight"] == 1
        assert await asked == "NOW"
        assert runtime.metrics().tables["asks_in_flight"] == 0


async def test_request_fails_at_once_on_a_stopped_runtime_and_its_reply_like_ask():
    runtime = AgentRuntime()
    runtime.register("echo", Echo())
    with pytest.raises(RuntimeClosedError, match="not running"):
        runtime.request(NOTES, Update("early"))
    async with runtime:
        with pytest.raises(AskError, match="bad request"):
            await runtime.request(NOTES, Update("fail"), reply_type=str)
        with pytest.raises(TimeoutError, match="no reply on 'notes'"):
            await runtime.request(NOTES, Update("hold"), timeout=0.05)


async def test_ask_times_out_cleanly_when_nobody_answers():
    runtime = AgentRuntime()
    async with runtime:
        with pytest.raises(TimeoutError, match="no reply on 'notes'"):
            await runtime.ask(NOTES, Update("anyone?"), timeout=0.05)
        assert runtime.metrics().tables["asks_in_flight"] == 0


async def test_ask_raises_the_handlers_failure_and_the_actor_goes_on():
    runtime = AgentRuntime()
    runtime.register("echo", Echo())
    async with runtime:
        with pytest.raises(AskError, match="bad request"):
            await runtime.ask(NOTES, Update("fail"), reply_type=str)
        assert await runtime.ask(NOTES, Update("still here"), reply_type=str) == "STILL HERE"
        assert runtime.metrics().handler_errors == 1


async def test_pending_asks_fail_when_the_runtime_stops():
    echo = Echo()
    runtime = AgentRuntime()
    runtime.register("echo", echo)
    await runtime.start()
    pending = asyncio.create_task(runtime.ask(NOTES, Update("hold"), timeout=30))
    await echo.holding.wait()
    await runtime.stop()
    with pytest.raises(RuntimeClosedError):
        await pending


class Relay(Agent):
    """On a query, publishes a note while handling it (through its RuntimeContext)."""

    @subscribe(Topic("test.query", UserQuery))
    async def on_query(self, message, ctx) -> None:
        await ctx.publish(NOTES, Update(f"relayed {message.text}"))


class MetadataRecorder(Agent):
    def __init__(self) -> None:
        self.metadata = None
        self.done = asyncio.Event()

    @subscribe(NOTES)
    async def on_notes(self, message, ctx) -> None:
        self.metadata = ctx.metadata
        self.done.set()


async def test_context_publish_defaults_source_and_participant_and_links_ids():
    recorder = MetadataRecorder()
    runtime = AgentRuntime()
    runtime.register("relay", Relay())
    runtime.register("recorder", recorder)
    query_topic = Topic("test.query", UserQuery)
    async with runtime:
        request_id = runtime.send(query_topic, UserQuery("hi", 1), participant_id="p9")
        await recorder.done.wait()
    metadata = recorder.metadata
    assert metadata.source == "relay"
    assert metadata.participant_id == "p9"
    assert metadata.parent_message_id == request_id
    assert metadata.correlation_id == request_id


async def test_registration_rules():
    runtime = AgentRuntime()
    runtime.register("a", Recorder())
    with pytest.raises(ValueError, match="already registered"):
        runtime.register("a", Recorder())

    class Bad(Agent):
        @subscribe(NOTES)
        async def on_notes(self, message) -> None: ...

    with pytest.raises(TypeError, match=r"exactly \(self, message, ctx\)"):
        runtime.register("bad", Bad())
    async with runtime:
        with pytest.raises(RuntimeError, match="only before start"):
            runtime.register("late", Recorder())
    with pytest.raises(RuntimeClosedError):
        await runtime.publish(NOTES, Update("after stop"))


async def test_an_injected_loss_is_reported_as_a_gap_with_its_range():
    with broker_process() as bus:
        recorder = Recorder(expected=4)
        runtime = AgentRuntime(bus)
        runtime.register("recorder", recorder)
        client = RawClient(bus)
        try:
            async with runtime:
                await asyncio.to_thread(client.wait_ready)
                for seq in (1, 2, 5, 6):  # the transport "drops" 3 and 4
                    client.send("notes", "p1", seq, {"text": f"m{seq}"})
                await recorder.done.wait()
                stats = runtime.metrics()
                gaps = list(runtime.gaps)
        finally:
            client.close()
    assert [text for text, _ in recorder.seen] == ["m1", "m2", "m5", "m6"]
    assert stats.gaps == 2
    assert len(gaps) == 1
    assert (gaps[0].topic, gaps[0].participant_id, gaps[0].first_missing, gaps[0].last_missing) == (
        "notes",
        "p1",
        3,
        4,
    )
    assert gaps[0].sender == client.sender


class Gauged(Agent):
    def __init__(self, key: str = "") -> None:
        self.key = key

    def gauges(self) -> dict[str, float]:
        return {"test.participants": 1}

    @subscribe(NOTES)
    async def on_notes(self, message, ctx) -> None: ...


class MetricsWatcher(Agent):
    def __init__(self) -> None:
        self.reports: list[RuntimeMetrics] = []
        self.got = asyncio.Event()

    @subscribe(METRICS_TOPIC)
    async def on_metrics(self, message, ctx) -> None:
        if message.gauges.get("test.participants") == 2:
            self.reports.append(message)
            self.got.set()


async def test_runtime_publishes_metrics_with_mailboxes_counters_and_summed_actor_gauges():
    watcher = MetricsWatcher()
    runtime = AgentRuntime(name="metered", metrics_interval=0.01)
    runtime.register_keyed("section", Gauged)
    runtime.register("watcher", watcher)
    async with runtime:
        for key in ("p1", "p2"):
            await runtime.publish(NOTES, Update("x"), participant_id=key)
        await watcher.got.wait()
    report = watcher.reports[0]
    assert report.runtime == "metered"
    assert set(report.actors) >= {"watcher", "section[p1]", "section[p2]"}
    assert report.published >= 2 and report.gaps == 0


class Finalizer(Agent):
    """Publishes a closing note from on_stop, as an actor finalizing an open stream would."""

    async def on_stop(self) -> None:
        assert self.runtime is not None  # registered
        await self.runtime.publish(
            NOTES, Update("closing note"), participant_id="p1", source=self.name
        )


async def test_on_stop_can_still_publish_before_the_runtime_closes():
    recorder = Recorder()
    host = AgentRuntime()
    host.register("recorder", recorder)
    async with host:
        leaving = AgentRuntime(host.address)
        leaving.register("finalizer", Finalizer())
        await leaving.start()
        await leaving.stop()
        await recorder.done.wait()
    assert recorder.seen == [("closing note", "p1")]


async def test_stop_takes_no_more_messages_so_no_keyed_instance_spawns_while_stopping():
    Section.instances = []
    runtime = AgentRuntime()
    runtime.register_keyed("section", Section)
    await runtime.start()
    runtime.send(NOTES, Update("late"), participant_id="p-late")
    await runtime.stop()
    assert runtime.keyed_instances("section") == {}


class Configured(Agent):
    """An actor whose topic comes from configuration, not from a decorator."""

    def __init__(self, topic: Topic, key: str = "") -> None:
        self.topic = topic
        self.texts: list[str] = []
        self.done = asyncio.Event()

    def handlers(self):
        return {self.topic: self.on_text}

    async def on_text(self, message, ctx) -> str:
        self.texts.append(message.text)
        self.done.set()
        return message.text


async def test_an_actor_can_name_its_subscriptions_at_registration():
    actor = Configured(context_topic("configured.a"))
    runtime = AgentRuntime()
    runtime.register("configured", actor)
    assert runtime.agent("configured") is actor
    async with runtime:
        await runtime.publish(context_topic("configured.a"), Update("hello"))
        await actor.done.wait()
    assert actor.texts == ["hello"]


async def test_a_keyed_kind_can_take_its_handlers_from_configuration():
    topic = context_topic("configured.keyed")
    runtime = AgentRuntime()
    runtime.register_keyed(
        "configured",
        Configured,
        factory=lambda key: Configured(topic, key),
        handlers={topic: Configured.on_text},
    )
    async with runtime:
        assert await runtime.ask(topic, Update("hi"), participant_id="p1", reply_type=str) == "hi"


def test_configured_handlers_are_checked_like_decorated_ones():
    class NotAsync(Agent):
        def handlers(self):
            return {NOTES: self.on_text}

        def on_text(self, message, ctx) -> None: ...

    async def elsewhere(message, ctx) -> None: ...

    with pytest.raises(TypeError, match="must be 'async def'"):
        AgentRuntime().register("bad", NotAsync())
    with pytest.raises(TypeError, match="is no handler method of Configured"):
        AgentRuntime().register_keyed("bad", Configured, handlers={NOTES: elsewhere})
    with pytest.raises(TypeError, match="is no handler method of Configured"):
        AgentRuntime().register_keyed("bad", Configured, handlers={NOTES: NotAsync.on_text})


def test_a_handler_is_wired_by_reference_never_by_name():
    with pytest.raises(
        TypeError,
        match=r"mapped to the name 'on_text'; a handler is wired by reference, never by name",
    ):
        AgentRuntime().register_keyed("named", Configured, handlers={NOTES: "on_text"})

    class Named(Configured):
        def handlers(self):
            return {self.topic: "on_text"}

    with pytest.raises(TypeError, match=r"self.on_text or .*Named.on_text"):
        AgentRuntime().register("named", Named(NOTES))


async def test_on_register_runs_at_register_before_the_start_and_may_register_companions():
    """The hook an agent that brings companion actors uses (the context manager's subscriber)."""
    seen: list[tuple[str, bool, bool]] = []

    class Echo(Agent):
        @subscribe(NOTES)
        async def on_note(self, message: Update, ctx) -> str:
            return f"echo:{message.text}"

    class Bringer(Agent):
        def on_register(self) -> None:
            assert self.runtime is not None
            seen.append((self.name, self.runtime is runtime, self.runtime.running))
            self.runtime.register(f"{self.name}.echo", Echo())

    runtime = AgentRuntime(name="hooks")
    runtime.register("bringer", Bringer())
    assert seen == [("bringer", True, False)]
    async with runtime:
        assert await runtime.ask(NOTES, Update("hi"), timeout=5) == "echo:hi"
