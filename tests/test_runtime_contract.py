"""The upstream runtime's contract on xrmq (issue 22): private messages, checked handlers,
the same publish rules. Several tests are upstream's own (``tests/test_agent_runtime.py``
in NVIDIA/xr-ai), ported to xrmq's API: its Observation/Speak types, a forwarder, a
speaker."""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING, Annotated, Any, Literal, TypeVar

import msgspec
import pytest

from xrmq.actors import GLOBAL
from xrmq.actors.runtime import Agent, AgentRuntime, Handlers, RuntimeContext, subscribe
from xrmq.actors.runtime.annotations import admits
from xrmq.schemas import ConversationContextUpdate as Update
from xrmq.schemas import UserQuery
from xrmq.topics import Topic

from buses import broker_process, expect_line, python, reap

if TYPE_CHECKING:
    from xrmq.schemas import ResponseOutput

pytestmark = [pytest.mark.timeout(30), pytest.mark.both_loops]


class Observation(msgspec.Struct, frozen=True):
    """Frozen, yet its list stays mutable: the case that needs private copies."""

    labels: list[str]


class Speak(msgspec.Struct, frozen=True):
    text: str


OBSERVATIONS = Topic("test.observations", Observation)
VOICE = Topic("test.contract.voice", Speak)
NOTES = Topic("test.contract.notes", Update)
SOURCES = Topic("test.contract.sources", Speak)


class Mutator(Agent):
    """Appends its own name to each observation it receives, after recording what arrived."""

    def __init__(self, expected: int = 1) -> None:
        self.received: list[tuple[str | None, str, list[str]]] = []
        self.expected = expected
        self.done = asyncio.Event()

    @subscribe(OBSERVATIONS)
    async def observe(self, event: Observation, ctx: RuntimeContext) -> None:
        self.received.append((ctx.participant_id, ctx.metadata.source, list(event.labels)))
        event.labels.append(f"mutated by {self.name}")
        if len(self.received) >= self.expected:
            self.done.set()


# ------------------------------------------------------------------ private messages


async def test_a_subscriber_mutating_its_message_does_not_change_another_subscribers_copy():
    first, second = Mutator(), Mutator()
    runtime = AgentRuntime()
    runtime.register("first", first)
    runtime.register("second", second)
    original = Observation(["kettle"])
    async with runtime:
        await runtime.publish(OBSERVATIONS, original, participant_id="alice", source="camera")
        await first.done.wait()
        await second.done.wait()
    assert original == Observation(["kettle"])
    assert first.received == [("alice", "camera", ["kettle"])]
    assert second.received == [("alice", "camera", ["kettle"])]


class TwoObservers(Agent):
    def __init__(self) -> None:
        self.seen: dict[str, list[str]] = {}
        self.done = asyncio.Event()

    def _see(self, handler: str, event: Observation) -> None:
        self.seen[handler] = list(event.labels)
        event.labels.clear()
        if len(self.seen) == 2:
            self.done.set()

    @subscribe(OBSERVATIONS)
    async def a_observe(self, event: Observation, ctx: RuntimeContext) -> None:
        self._see("a", event)

    @subscribe(OBSERVATIONS)
    async def b_observe(self, event: Observation, ctx: RuntimeContext) -> None:
        self._see("b", event)


async def test_two_handlers_of_one_agent_get_their_own_copies():
    agent = TwoObservers()
    runtime = AgentRuntime()
    runtime.register("two", agent)
    async with runtime:
        await runtime.publish(OBSERVATIONS, Observation(["cup"]), participant_id="alice")
        await agent.done.wait()
    assert agent.seen == {"a": ["cup"], "b": ["cup"]}


class KeyedMutator(Mutator):
    instances: dict[str, KeyedMutator] = {}

    def __init__(self, key: str) -> None:
        super().__init__(expected=2)
        KeyedMutator.instances[key] = self


async def test_keyed_instances_each_get_their_own_copy_of_a_global_message():
    KeyedMutator.instances = {}
    runtime = AgentRuntime()
    runtime.register_keyed("keyed", KeyedMutator)
    async with runtime:
        for key in ("p1", "p2"):  # spawn both instances (an ask returns once handled)
            await runtime.ask(OBSERVATIONS, Observation([key]), participant_id=key)
        await runtime.publish(OBSERVATIONS, Observation(["everyone"]))
        for instance in KeyedMutator.instances.values():
            await instance.done.wait()
    assert {
        key: [labels for _, _, labels in instance.received]
        for key, instance in KeyedMutator.instances.items()
    } == {"p1": [["p1"], ["everyone"]], "p2": [["p2"], ["everyone"]]}


class Holder(Agent):
    def __init__(self) -> None:
        self.messages: list[Any] = []
        self.done = asyncio.Event()

    @subscribe(NOTES)
    async def on_note(self, message: Update, ctx: RuntimeContext) -> None:
        self.messages.append(message)
        self.done.set()


async def test_subscribers_of_a_deeply_immutable_topic_share_one_decoded_message():
    first, second = Holder(), Holder()
    runtime = AgentRuntime()
    runtime.register("first", first)
    runtime.register("second", second)
    assert NOTES.shared and not OBSERVATIONS.shared
    async with runtime:
        await runtime.publish(NOTES, Update("shared"))
        await first.done.wait()
        await second.done.wait()
    assert first.messages[0] is second.messages[0]


async def test_two_actors_in_one_process_fed_from_another_process_get_private_copies():
    first, second = Mutator(expected=3), Mutator(expected=3)
    with broker_process() as bus:
        runtime = AgentRuntime(bus, name="contract-subscribers")
        runtime.register("first", first)
        runtime.register("second", second, participant_id="alice")
        publisher = None
        try:
            async with runtime:  # subscriptions are live through the broker once started
                publisher = python("observation_publisher.py", bus, "3", "alice")
                await asyncio.to_thread(expect_line, publisher, "published")
                await first.done.wait()
                await second.done.wait()
                gaps = runtime.metrics().gaps
        finally:
            reap(*(p for p in [publisher] if p))
    expected = [("alice", "application", ["kettle", f"m{i}"]) for i in range(3)]
    assert first.received == expected
    assert second.received == expected
    assert gaps == 0


# ------------------------------------------------------------------ checked handlers


class WrongType(Agent):
    @subscribe(OBSERVATIONS)
    async def observe(self, event: str, ctx: RuntimeContext) -> None: ...


class WrongStruct(Agent):
    @subscribe(OBSERVATIONS)
    async def observe(self, event: Speak, ctx: RuntimeContext) -> None: ...


def test_a_handler_annotated_with_another_type_is_a_type_error_naming_handler_topic_types():
    message = (
        r"WrongType.observe: its message is annotated str, but topic 'test.observations' carries "
        r"Observation"
    )
    with pytest.raises(TypeError, match=message):
        AgentRuntime().register("wrong", WrongType())
    with pytest.raises(TypeError, match=message):
        AgentRuntime().register_keyed("wrong", WrongType)
    with pytest.raises(
        TypeError, match=r"WrongStruct.observe: .*annotated Speak, .*carries Observation"
    ):
        AgentRuntime().register("wrong", WrongStruct())


class Configured(Agent):
    def __init__(self, topic: Topic) -> None:
        self.topic = topic

    def handlers(self) -> Handlers:
        return {self.topic: self.on_speak}

    async def on_speak(self, message: Speak, ctx: RuntimeContext) -> None: ...


def test_a_configured_handler_is_checked_against_its_topic_too():
    AgentRuntime().register("fine", Configured(VOICE))
    with pytest.raises(
        TypeError, match=r"Configured.on_speak: .*annotated Speak, .*'test.contract.notes' carries"
    ):
        AgentRuntime().register("wrong", Configured(NOTES))
    with pytest.raises(TypeError, match=r"annotated Speak, .*carries ConversationContextUpdate"):
        AgentRuntime().register_keyed("wrong", Configured, handlers={NOTES: Configured.on_speak})


T = TypeVar("T", bound=msgspec.Struct)


class Admitting(Agent):
    """Seven handlers of NOTES, each annotated differently; each records that it ran."""

    def __init__(self) -> None:
        self.ran: list[str] = []
        self.all_ran = asyncio.Event()

    def _ran(self, name: str) -> None:
        self.ran.append(name)
        if len(self.ran) == 7:
            self.all_ran.set()

    @subscribe(NOTES)
    async def bare(self, message, ctx) -> None:
        self._ran("bare")

    @subscribe(NOTES)
    async def exact(self, message: Update, ctx: RuntimeContext) -> None:
        self._ran("exact")

    @subscribe(NOTES)
    async def any_(self, message: Any, ctx: RuntimeContext) -> None:
        self._ran("any_")

    @subscribe(NOTES)
    async def base(self, message: msgspec.Struct, ctx: RuntimeContext) -> None:
        self._ran("base")

    @subscribe(NOTES)
    @subscribe(VOICE)
    async def union(self, message: Update | Speak, ctx: RuntimeContext) -> None:
        self._ran("union")

    @subscribe(NOTES)
    async def optional(self, message: Update | None, ctx: RuntimeContext) -> None:
        self._ran("optional")

    @subscribe(NOTES)
    async def typevar(self, message: T, ctx: RuntimeContext) -> None:
        self._ran("typevar")


async def test_unannotated_and_admitting_annotations_register_and_each_handles_the_topic():
    admitting = Admitting()
    runtime = AgentRuntime()
    runtime.register("admitting", admitting)
    async with runtime:
        runtime.send(NOTES, Update("one note"))
        await admitting.all_ran.wait()
        assert sorted(admitting.ran) == sorted(
            ["bare", "exact", "any_", "base", "union", "optional", "typevar"]
        )
        assert runtime.metrics().delivered == 7  # one delivery per handler, nothing else


@pytest.mark.parametrize(
    "annotation, admitted",
    [
        (Speak, True),
        (msgspec.Struct, True),
        (object, True),
        (Any, True),
        (Speak | None, True),
        (Annotated[Speak, "meta"], True),
        (T, True),
        ("Speak", True),
        ("xrmq.Speak", True),
        (Update, False),
        (str, False),
        (list[Speak], False),
        (Literal["x"], False),
        (Update | None, False),
        ("SpeakLouder", False),
        (TypeVar("U", bound=Update), False),
    ],
)
def test_an_annotation_admits_what_a_type_checker_would(annotation, admitted):
    assert admits(annotation, Speak) is admitted


def test_an_annotation_that_cannot_be_resolved_is_compared_by_name():
    class Local(msgspec.Struct, frozen=True):
        x: int

    local_topic = Topic("test.contract.local", Local)

    class ByName(Agent):
        @subscribe(local_topic)
        async def on_local(self, message: Local, ctx: RuntimeContext) -> None: ...

    class TypeCheckingOnly(Agent):
        @subscribe(VOICE)
        async def on_voice(self, message: ResponseOutput, ctx: RuntimeContext) -> None: ...

    AgentRuntime().register("by-name", ByName())  # "Local" is not in the module: compared by name
    with pytest.raises(
        TypeError,
        match=r"annotated 'ResponseOutput', but topic 'test.contract.voice' carries Speak",
    ):
        AgentRuntime().register("type-checking", TypeCheckingOnly())


# ------------------------------------------------------------------ publish rules


class Forwarder(Agent):
    """Upstream's _EventForwarder: on an observation, speaks (participant omitted)."""

    def __init__(self, participant_id: Any = None) -> None:
        self.participant_id = participant_id
        self.input_message_id = ""

    @subscribe(OBSERVATIONS)
    async def forward(self, event: Observation, ctx: RuntimeContext) -> None:
        self.input_message_id = ctx.metadata.message_id
        if self.participant_id is None:
            await ctx.publish(VOICE, Speak("Seen."))
        else:
            await ctx.publish(VOICE, Speak("Seen."), participant_id=self.participant_id)


class Speaker(Agent):
    def __init__(self) -> None:
        self.metadata: list[Any] = []
        self.done = asyncio.Event()

    @subscribe(VOICE)
    async def speak(self, event: Speak, ctx: RuntimeContext) -> None:
        self.metadata.append(ctx.metadata)
        self.done.set()


async def _forwarded(
    participant_id: Any, *, speaker_for: str | None = None
) -> tuple[Forwarder, Any]:
    forwarder, speaker = Forwarder(participant_id), Speaker()
    runtime = AgentRuntime()
    runtime.register("forwarder", forwarder)
    runtime.register("speaker", speaker, participant_id=speaker_for)
    async with runtime:
        await runtime.publish(
            OBSERVATIONS, Observation(["cup"]), participant_id="alice", source="camera"
        )
        await speaker.done.wait()
    return forwarder, speaker.metadata[0]


async def test_context_publish_without_a_participant_keeps_the_deliverys_participant():
    forwarder, metadata = await _forwarded(None)
    assert metadata.participant_id == "alice"
    assert metadata.source == "forwarder"
    assert metadata.parent_message_id == forwarder.input_message_id
    assert metadata.correlation_id == forwarder.input_message_id


async def test_context_publish_with_global_reaches_everyone_from_a_participant_scoped_handler():
    # bob's actor hears global messages
    forwarder, metadata = await _forwarded(GLOBAL, speaker_for="bob")
    assert metadata.participant_id is None
    assert metadata.parent_message_id == forwarder.input_message_id


async def test_context_publish_with_another_participant_targets_that_participant():
    _, metadata = await _forwarded("bob", speaker_for="bob")
    assert metadata.participant_id == "bob"


class Asker(Agent):
    def __init__(self, participant_id: Any) -> None:
        self.participant_id = participant_id
        self.answer: Any = None
        self.done = asyncio.Event()

    @subscribe(OBSERVATIONS)
    async def on_observation(self, event: Observation, ctx: RuntimeContext) -> None:
        self.answer = await ctx.ask(
            NOTES, Update("who?"), reply_type=str, participant_id=self.participant_id
        )
        self.done.set()


class WhoAsks(Agent):
    @subscribe(NOTES)
    async def on_note(self, message: Update, ctx: RuntimeContext) -> str:
        return f"{ctx.participant_id} from {ctx.metadata.source}"


@pytest.mark.parametrize(
    "participant_id, answer", [(None, "alice from asker"), (GLOBAL, "None from asker")]
)
async def test_context_ask_follows_the_same_participant_rule(participant_id, answer):
    asker = Asker(participant_id)
    runtime = AgentRuntime()
    runtime.register("asker", asker)
    runtime.register("who", WhoAsks())
    async with runtime:
        await runtime.publish(OBSERVATIONS, Observation([]), participant_id="alice")
        await asker.done.wait()
    assert asker.answer == answer


async def test_runtime_publish_and_ask_take_global_as_none():
    speaker = Speaker()
    runtime = AgentRuntime()
    runtime.register("speaker", speaker)
    runtime.register("who", WhoAsks())
    async with runtime:
        await runtime.publish(VOICE, Speak("hello"), participant_id=GLOBAL)
        assert (
            await runtime.ask(NOTES, Update("?"), reply_type=str, participant_id=GLOBAL)
            == "None from application"
        )
        await speaker.done.wait()
        with pytest.raises(
            ValueError, match="participant_id: send.. takes None for a global message"
        ):
            runtime.send(VOICE, Speak("x"), participant_id=GLOBAL)
    assert speaker.metadata[0].participant_id is None


class TwoHandlers(Agent):
    def __init__(self) -> None:
        self.calls: list[tuple[str, str]] = []
        self.done = asyncio.Event()

    def _called(self, handler: str, text: str) -> None:
        self.calls.append((handler, text))
        if len(self.calls) == 2:
            self.done.set()

    @subscribe(NOTES)
    async def first(self, message: Update, ctx: RuntimeContext) -> None:
        self._called("first", message.text)

    @subscribe(NOTES)
    async def second(self, message: Update, ctx: RuntimeContext) -> None:
        self._called("second", message.text)


async def test_two_handlers_for_one_topic_in_one_agent_are_both_called():
    agent = TwoHandlers()
    runtime = AgentRuntime()
    runtime.register("two", agent)
    async with runtime:
        await runtime.publish(NOTES, Update("hello"))
        await agent.done.wait()
    assert agent.calls == [("first", "hello"), ("second", "hello")]


async def test_a_keyed_kind_with_two_handlers_for_one_topic_calls_both():
    runtime = AgentRuntime()
    runtime.register_keyed("two", TwoHandlers, factory=lambda key: TwoHandlers())
    async with runtime:
        await runtime.ask(NOTES, Update("hi"), participant_id="p1")  # the first handler's reply
        agent = runtime.keyed_instances("two")["p1"]
        await agent.done.wait()
    assert agent.calls == [("first", "hi"), ("second", "hi")]


def test_one_handler_subscribing_to_one_topic_twice_is_a_type_error():
    class Twice(Agent):
        @subscribe(NOTES)
        @subscribe(NOTES)
        async def on_note(self, message: Update, ctx: RuntimeContext) -> None: ...

    with pytest.raises(
        TypeError, match=r"Twice.on_note: subscribes to topic 'test.contract.notes' twice"
    ):
        AgentRuntime().register("twice", Twice())


class SourcePublisher(Agent):
    def __init__(self) -> None:
        self.error: BaseException | None = None
        self.done = asyncio.Event()

    @subscribe(SOURCES)
    async def on_source(self, message: Speak, ctx: RuntimeContext) -> None:
        try:
            await ctx.publish(VOICE, Speak("x"), source=message.text)
        except ValueError as error:
            self.error = error
        self.done.set()


@pytest.mark.parametrize("source", ["", "   ", "\t\n"])
async def test_an_empty_or_whitespace_source_is_a_value_error_naming_source(source):
    agent = SourcePublisher()
    runtime = AgentRuntime()
    runtime.register("publisher", agent)
    async with runtime:
        with pytest.raises(ValueError, match="source: must be a non-empty name"):
            await runtime.publish(VOICE, Speak("x"), source=source)
        with pytest.raises(ValueError, match="source: must be a non-empty name"):
            runtime.send(VOICE, Speak("x"), source=source)
        with pytest.raises(ValueError, match="source: must be a non-empty name"):
            await runtime.ask(VOICE, Speak("x"), source=source)
        await runtime.publish(SOURCES, Speak(source))
        await agent.done.wait()
        assert runtime.metrics().published == 1  # nothing invalid went out
    assert "source: must be a non-empty name" in str(agent.error)


@pytest.mark.parametrize("name", ["", " ", "\t \n"])
def test_empty_and_whitespace_only_topic_agent_runtime_and_participant_names_are_value_errors(name):
    with pytest.raises(
        ValueError, match="Topic.name: must be a non-empty string, not only whitespace"
    ):
        Topic(name, Speak)
    with pytest.raises(ValueError, match="register: name must be a non-empty string"):
        AgentRuntime().register(name, Speaker())
    with pytest.raises(ValueError, match="register: name must be a non-empty string"):
        AgentRuntime().register_keyed(name, Speaker)
    with pytest.raises(ValueError, match="register: participant_id must be a non-empty string"):
        AgentRuntime().register("speaker", Speaker(), participant_id=name)
    with pytest.raises(ValueError, match="name: must be a non-empty string"):
        AgentRuntime(name=name)


@pytest.mark.parametrize("participant_id", ["", "  "])
async def test_a_whitespace_only_participant_is_a_value_error_naming_participant_id(participant_id):
    async with AgentRuntime() as runtime:
        with pytest.raises(ValueError, match="participant_id: must be None or a non-empty string"):
            await runtime.publish(VOICE, Speak("x"), participant_id=participant_id)


class Relay(Agent):
    """Publishes a mapping from a handler: converted like one given to the runtime."""

    @subscribe(OBSERVATIONS)
    async def on_observation(self, event: Observation, ctx: RuntimeContext) -> None:
        await ctx.publish(VOICE, {"text": " ".join(event.labels)})


async def test_publish_accepts_a_mapping_converted_into_the_topics_type():
    speaker = Speaker()
    holder = Holder()
    runtime = AgentRuntime()
    runtime.register("relay", Relay())
    runtime.register("speaker", speaker)
    runtime.register("holder", holder)
    async with runtime:
        await runtime.publish(NOTES, {"text": "from a dict"})
        await runtime.publish(OBSERVATIONS, {"labels": ["kettle", "on"]}, participant_id="alice")
        await holder.done.wait()
        await speaker.done.wait()
    assert holder.messages == [Update("from a dict")]
    assert speaker.metadata[0].source == "relay" and speaker.metadata[0].participant_id == "alice"


def test_a_mapping_that_does_not_fit_the_topic_is_a_value_error_naming_the_field():
    with pytest.raises(ValueError, match=r"topic 'test.contract.voice' carries Speak: .*`text`"):
        VOICE.validate({})
    with pytest.raises(
        ValueError, match=r"carries Speak: Expected `str`, got `int` - at `\$.text`"
    ):
        VOICE.encode({"text": 5})
    with pytest.raises(
        ValueError, match=r"carries ConversationContextUpdate: .*text: must be non-empty"
    ):
        NOTES.validate({"text": " "})
    with pytest.raises(
        ValueError, match=r"carries Speak: no field 'txt'; its fields are \('text',\)"
    ):
        VOICE.validate({"txt": "typo"})
    assert VOICE.validate({"text": "ok"}) == Speak("ok")
    with pytest.raises(TypeError, match="carries Speak, not UserQuery"):
        VOICE.validate(UserQuery("hi", 1))


class Tagged(msgspec.Struct, frozen=True, tag=True):
    x: int


def test_a_mapping_may_carry_a_tagged_structs_tag():
    topic = Topic("test.contract.tagged", Tagged)
    assert topic.validate({"type": "Tagged", "x": 1}) == topic.validate({"x": 1}) == Tagged(1)
    with pytest.raises(ValueError, match=r"Invalid value 'Other' - at `\$.type`"):
        topic.validate({"type": "Other", "x": 1})


async def test_a_bad_mapping_publishes_nothing():
    async with AgentRuntime() as runtime:
        with pytest.raises(ValueError, match=r"at `\$.text`"):
            await runtime.publish(VOICE, {"text": None})
        assert runtime.metrics().published == 0


# ------------------------------------------------------------------ more of upstream's tests,
# ported


class PartiallyInvalid(Agent):
    @subscribe(OBSERVATIONS)
    async def a_valid(self, message: Observation, ctx: RuntimeContext) -> None: ...

    @subscribe(OBSERVATIONS)
    async def z_invalid(self, message: str, ctx: RuntimeContext) -> None: ...


def test_a_registration_failure_leaves_the_runtime_unchanged():
    runtime = AgentRuntime()
    with pytest.raises(TypeError, match="z_invalid: its message is annotated str"):
        runtime.register("agent", PartiallyInvalid())
    assert runtime._routes == {} and runtime._private_routes == {}
    runtime.register("agent", Mutator())  # the name was not taken by the failed registration


class Failing(Agent):
    def __init__(self, failure: Exception | None = None) -> None:
        self.failure = failure
        self.completed = asyncio.Event()

    @subscribe(OBSERVATIONS)
    async def observe(self, event: Observation, ctx: RuntimeContext) -> None:
        await asyncio.sleep(0)  # the yield point upstream's test has: the handler suspends once
        self.completed.set()
        if self.failure is not None:
            raise self.failure


async def test_one_failing_handler_does_not_stop_another():
    failed, completed = Failing(RuntimeError("subscriber failed")), Failing()
    runtime = AgentRuntime()
    runtime.register("failed", failed)
    runtime.register("completed", completed)
    async with runtime:
        await runtime.publish(OBSERVATIONS, Observation([]), participant_id="alice")
        await failed.completed.wait()
        await completed.completed.wait()
        failed.completed.clear()
        await runtime.publish(OBSERVATIONS, Observation([]), participant_id="alice")
        await failed.completed.wait()  # the failing actor goes on with the next message
        errors = runtime.metrics().handler_errors  # its failure is counted as it raises
    assert errors == 2


class Slow(Agent):
    def __init__(self) -> None:
        self.started = asyncio.Event()
        self.stopped = False

    @subscribe(OBSERVATIONS)
    async def observe(self, event: Observation, ctx: RuntimeContext) -> None:
        self.started.set()
        try:
            await asyncio.Event().wait()
        finally:
            self.stopped = True


async def test_stop_cancels_a_running_handler():
    agent = Slow()
    runtime = AgentRuntime()
    runtime.register("slow", agent)
    await runtime.start()
    await runtime.publish(OBSERVATIONS, Observation([]), participant_id="alice")
    await agent.started.wait()
    await runtime.stop()
    assert agent.stopped


async def test_a_global_publish_reaches_subscribers_with_no_participant():
    first = Mutator()
    runtime = AgentRuntime()
    runtime.register("first", first)
    async with runtime:
        await runtime.publish(OBSERVATIONS, Observation(["all"]))
        await first.done.wait()
    assert first.received == [(None, "application", ["all"])]


async def test_publishing_before_start_or_after_stop_raises_runtime_closed_error():
    from xrmq.actors.runtime import RuntimeClosedError

    runtime = AgentRuntime()
    runtime.register("agent", Mutator())
    with pytest.raises(RuntimeClosedError):
        await runtime.publish(OBSERVATIONS, Observation([]), participant_id="alice")
    async with runtime:
        with pytest.raises(ValueError, match="participant_id: must be None or a non-empty"):
            await runtime.publish(OBSERVATIONS, Observation([]), participant_id="")
    with pytest.raises(RuntimeClosedError):
        await runtime.publish(OBSERVATIONS, Observation([]), participant_id="alice")
