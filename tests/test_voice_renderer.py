"""VoiceRenderer on the embedded runtime: the ordering rules end to end, through the bus.

Playback time is controlled by the test (``GateSleep``): a segment "plays" until the
test releases it, so cut-in and supersession are observed while output is playing.
A fragment that is meant to play as one segment ends with a word break: the renderer
speaks an open fragment up to its last word break as soon as it arrives, so without
one the segments would depend on whether the terminator came in the same loop pass.
"""

from __future__ import annotations

import asyncio
import itertools

import pytest

from xrmq.actors.interaction import ResponseOutputs
from xrmq.actors.runtime import Agent, AgentRuntime, RuntimeContext, subscribe
from xrmq.actors.voice.ordering import Segment
from xrmq.actors.voice.renderer import VoiceRenderer
from xrmq.actors.voice.sinks import CallbackSink, RecordingSink
from xrmq.schemas import Interrupted, ResponseOutput, UserQuery
from xrmq.topics import INTERRUPTED_TOPIC, QUERY_TOPIC, VOICE_OUTPUT_TOPIC


class GateSleep:
    """Injectable sleep that lasts until the test releases it; remembers requested seconds."""

    def __init__(self) -> None:
        self.requested: list[float] = []
        self._futures: asyncio.Queue[asyncio.Future[None]] = asyncio.Queue()

    async def __call__(self, seconds: float) -> None:
        self.requested.append(seconds)
        future = asyncio.get_running_loop().create_future()
        self._futures.put_nowait(future)
        await future

    async def release(self) -> None:
        """End the oldest sleep still running (waiting for one to start if needed)."""
        while True:
            future = await self._futures.get()
            if not future.done():
                future.set_result(None)
                return


class FakeClock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


class ObservedRenderer(VoiceRenderer):
    """A renderer that lets the test wait until it has handled N outputs."""

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.outputs_handled = 0
        self._handled = asyncio.Condition()

    async def handle_output(self, message: ResponseOutput, ctx: RuntimeContext) -> None:
        await super().handle_output(message, ctx)
        self.outputs_handled += 1
        async with self._handled:
            self._handled.notify_all()

    async def handled(self, count: int) -> None:
        async with self._handled:
            await self._handled.wait_for(lambda: self.outputs_handled >= count)


def runtime_with(renderer: VoiceRenderer) -> AgentRuntime:
    runtime = AgentRuntime()
    runtime.register("renderer", renderer)
    return runtime


def order_of(sink: RecordingSink, participant_id: str = "p1") -> list[str]:
    """Sources of played segments and end markers, consecutive repeats collapsed."""
    labels = [
        ",".join(event.sources) if isinstance(event, Segment) else f"end:{event.reason}"
        for event in sink.events
        if event.participant_id == participant_id
    ]
    return [label for label, _ in itertools.groupby(labels)]


async def test_renderer_plays_a_reply_published_with_response_outputs():
    sink = RecordingSink(words_per_minute=None)
    async with runtime_with(VoiceRenderer(sink)) as runtime:
        outputs = ResponseOutputs(runtime, VOICE_OUTPUT_TOPIC, source="conversation")
        async with outputs.reply("p1", request_id="turn-1", timestamp_us=5) as reply:
            await reply.send("Hello ")
            await reply.send("there.")
        await sink.wait_until(lambda s: s.ended("p1") == ["completed"])
    assert " ".join(sink.heard("p1")) == "Hello there."
    first = sink.events[0]
    assert (
        isinstance(first, Segment)
        and first.sources == ("conversation",)
        and first.timestamp_us == 5
    )


async def test_replies_from_an_agents_runtime_context_play_with_the_agents_name_as_source():
    class Echo(Agent):
        @subscribe(QUERY_TOPIC)
        async def on_query(self, message: UserQuery, ctx: RuntimeContext) -> None:
            outputs = ResponseOutputs(ctx, VOICE_OUTPUT_TOPIC)
            assert ctx.participant_id is not None  # the query carries one
            async with outputs.reply(
                ctx.participant_id, request_id=ctx.metadata.message_id
            ) as reply:
                await reply.send(f"You said {message.text}. ")

    sink = RecordingSink(words_per_minute=None)
    runtime = runtime_with(VoiceRenderer(sink))
    runtime.register("echo", Echo())
    async with runtime:
        await runtime.publish(QUERY_TOPIC, UserQuery("hello", 1), participant_id="p1")
        await sink.wait_until(lambda s: s.ended("p1") == ["completed"])
    assert sink.heard("p1") == ["You said hello."]
    assert order_of(sink) == ["echo", "end:completed"]


async def test_two_producers_streaming_for_one_participant_never_interleave():
    sink = RecordingSink(words_per_minute=None)
    async with runtime_with(VoiceRenderer(sink)) as runtime:
        chef = ResponseOutputs(runtime, VOICE_OUTPUT_TOPIC, source="chef")
        timer = ResponseOutputs(runtime, VOICE_OUTPUT_TOPIC, source="timer")
        async with chef.reply("p1", request_id="t1") as a, timer.reply("p1", request_id="t1") as b:
            for word in ("one ", "two ", "three "):
                await a.send(f"chef-{word}")
                await b.send(f"timer-{word}")
        await sink.wait_until(lambda s: s.ended("p1") == ["completed", "completed"])
    assert order_of(sink) == ["chef", "end:completed", "timer", "end:completed"]
    assert (
        " ".join(sink.heard("p1")) == "chef-one chef-two chef-three timer-one timer-two timer-three"
    )


async def test_router_acknowledgement_published_before_the_conversations_first_chunk_plays_first():
    sink = RecordingSink(words_per_minute=None)
    async with runtime_with(VoiceRenderer(sink)) as runtime:
        router = ResponseOutputs(runtime, VOICE_OUTPUT_TOPIC, source="router")
        conversation = ResponseOutputs(runtime, VOICE_OUTPUT_TOPIC, source="conversation")
        async with conversation.reply("p1", request_id="turn-1") as answer:
            async with router.reply("p1", request_id="turn-1") as ack:
                await ack.send("Let me check. ")
            await answer.send("Your tea is ready. ")
        await sink.wait_until(lambda s: len(s.ended("p1")) == 2)
    assert order_of(sink) == ["router", "end:completed", "conversation", "end:completed"]
    assert sink.heard("p1") == ["Let me check.", "Your tea is ready."]


async def test_newer_query_drops_the_older_replys_remaining_fragments():
    gate = GateSleep()
    sink = RecordingSink(sleep=gate)
    renderer = VoiceRenderer(sink, query_topic=QUERY_TOPIC)
    async with runtime_with(renderer) as runtime:
        outputs = ResponseOutputs(runtime, VOICE_OUTPUT_TOPIC, source="conversation")
        async with outputs.reply("p1", request_id="turn-1") as old:
            await old.send("Old answer ")
            await sink.wait_until(lambda s: s.heard() == ["Old answer"])
            await runtime.publish(
                QUERY_TOPIC, UserQuery("Actually, something else", 2), participant_id="p1"
            )
            await old.send("goes on and on.")
        async with outputs.reply("p1", request_id="turn-2") as new:
            await new.send("New answer.")
        await sink.wait_until(lambda s: s.heard() == ["Old answer", "New answer."])
        await gate.release()
        await sink.wait_until(lambda s: len(s.ended()) == 2)
    assert sink.ended() == ["superseded", "completed"]
    assert sink.events[0].token not in sink.completed
    # the cut reply, its fragment and its terminator
    assert renderer.ordering.counts["superseded"] == 3


async def test_urgent_update_cuts_in_and_plays_next():
    gate = GateSleep()
    sink = RecordingSink(sleep=gate)
    renderer = VoiceRenderer(sink)
    async with runtime_with(renderer) as runtime:
        conversation = ResponseOutputs(runtime, VOICE_OUTPUT_TOPIC, source="conversation")
        safety = ResponseOutputs(runtime, VOICE_OUTPUT_TOPIC, source="safety")
        for turn, text in (
            ("t1", "Here is the whole procedure, step by step. "),
            ("t2", "Next reply. "),
        ):
            async with conversation.reply("p1", request_id=turn) as reply:
                await reply.send(text)
        await sink.wait_until(lambda s: len(s.heard()) == 1)
        await safety.update("p1", "Stop, the pot is boiling over!", urgent=True)
        await sink.wait_until(lambda s: len(s.heard()) == 2)
        await gate.release()
        await sink.wait_until(lambda s: len(s.heard()) == 3)
        await gate.release()
        await sink.wait_until(lambda s: len(s.ended()) == 3)
    assert sink.heard() == [
        "Here is the whole procedure, step by step.",
        "Stop, the pot is boiling over!",
        "Next reply.",
    ]
    assert order_of(sink) == [
        "conversation",
        "end:cut",
        "safety",
        "end:completed",
        "conversation",
        "end:completed",
    ]
    assert sink.events[0].token not in sink.completed


async def test_withdraw_removes_only_that_producers_queued_updates():
    gate = GateSleep()
    sink = RecordingSink(sleep=gate)
    renderer = ObservedRenderer(sink)
    async with runtime_with(renderer) as runtime:
        conversation = ResponseOutputs(runtime, VOICE_OUTPUT_TOPIC, source="conversation")
        timer = ResponseOutputs(runtime, VOICE_OUTPUT_TOPIC, source="timer")
        monitor = ResponseOutputs(runtime, VOICE_OUTPUT_TOPIC, source="monitor")
        async with conversation.reply("p1", request_id="t1") as reply:
            await reply.send("Busy talking. ")
        await sink.wait_until(lambda s: s.heard() == ["Busy talking."])
        await timer.update("p1", "Timer done.")
        await monitor.update("p1", "Milk is low.")
        await timer.update("p2", "Other participant's timer.")
        await timer.withdraw("p1")
        await renderer.handled(6)  # 2 reply frames, 3 updates, 1 withdraw
        await sink.wait_until(lambda s: len(s.heard("p2")) == 1)
        await gate.release()  # p1's reply finishes; only the monitor's update is left for p1
        await gate.release()  # p2's update finishes
        await sink.wait_until(lambda s: len(s.heard("p1")) == 2)
        await gate.release()
        await sink.wait_until(lambda s: len(s.ended("p1")) == 2)
    assert sink.heard("p1") == ["Busy talking.", "Milk is low."]
    assert sink.heard("p2") == ["Other participant's timer."]
    assert renderer.ordering.counts["withdrawn"] == 1


async def test_idle_timeout_closes_an_abandoned_stream():
    clock, timer = FakeClock(), GateSleep()
    sink = RecordingSink(words_per_minute=None)
    renderer = VoiceRenderer(sink, idle_timeout_s=5, clock=clock, sleep=timer)
    async with runtime_with(renderer) as runtime:
        fragment = ResponseOutput(
            kind="reply", text="Half a sent", request_id="t1", response_id="s1", final=False
        )
        await runtime.publish(
            VOICE_OUTPUT_TOPIC, fragment, participant_id="p1", source="conversation"
        )
        await sink.wait_until(lambda s: s.heard() == ["Half a"])
        clock.now = 5.0
        await timer.release()
        await sink.wait_until(lambda s: s.ended() == ["completed"])
    assert timer.requested == [5.0]
    assert sink.heard() == ["Half a", "sent"]
    assert renderer.ordering.counts["stream_idle_timeout"] == 1


async def test_out_of_order_duplicate_and_invalid_frames_are_dropped_without_crashing():
    sink = RecordingSink(words_per_minute=None)
    renderer = VoiceRenderer(sink)

    def reply(text: str = "", response_id: str | None = None, final: bool = True) -> ResponseOutput:
        return ResponseOutput(
            kind="reply", text=text, request_id="t1", response_id=response_id, final=final
        )

    async with runtime_with(renderer) as runtime:
        frames = [
            ("p1", reply("", "s9")),  # terminator before its stream
            ("p1", reply("Too late ", "s9", final=False)),  # the stream after its terminator
            ("p1", reply("One.", "s1", final=False)),
            ("p1", reply("", "s1")),
            ("p1", reply("", "s1")),  # duplicate terminator
            ("p1", reply()),  # no text, no response_id: fails validate_boundary
            (None, reply("Nobody to speak to.")),
            ("p1", reply("Still here.")),
        ]
        for participant_id, frame in frames:
            await runtime.publish(
                VOICE_OUTPUT_TOPIC, frame, participant_id=participant_id, source="conversation"
            )
        await sink.wait_until(lambda s: s.ended() == ["completed", "completed"])
    assert sink.heard() == ["One.", "Still here."]
    counts = renderer.ordering.counts
    assert (
        counts["unknown_terminator"],
        counts["late"],
        counts["invalid"],
        counts["no_participant"],
    ) == (1, 2, 1, 1)


async def test_interrupted_cuts_the_participants_output():
    gate = GateSleep()
    sink = RecordingSink(sleep=gate)
    async with runtime_with(VoiceRenderer(sink, interrupted_topic=INTERRUPTED_TOPIC)) as runtime:
        outputs = ResponseOutputs(runtime, VOICE_OUTPUT_TOPIC, source="conversation")
        async with outputs.reply("p1", request_id="t1") as reply:
            await reply.send("A long explanation.")
        await sink.wait_until(lambda s: len(s.heard()) == 1)
        await runtime.publish(INTERRUPTED_TOPIC, Interrupted(), participant_id="p1", source="voice")
        await sink.wait_until(lambda s: s.ended() == ["interrupted"])
    assert sink.events[0].token not in sink.completed


async def test_a_failing_sink_is_logged_and_playback_goes_on():
    heard: list[str] = []
    ended: list[str] = []
    both_ended = asyncio.Event()

    def render(segment: Segment) -> None:
        if segment.text == "Broken.":
            raise OSError("audio device gone")
        heard.append(segment.text)

    def on_end(notice) -> None:
        ended.append(notice.reason)
        if len(ended) == 2:
            both_ended.set()

    renderer = VoiceRenderer(CallbackSink(render, on_end, words_per_minute=None))
    async with runtime_with(renderer) as runtime:
        outputs = ResponseOutputs(runtime, VOICE_OUTPUT_TOPIC, source="conversation")
        for text in ("Broken.", "Works."):
            async with outputs.reply("p1", request_id="t1") as reply:
                await reply.send(text)
        await both_ended.wait()
    assert heard == ["Works."]
    assert renderer.sink_failures == 1


async def test_stopping_the_runtime_cancels_playback_in_progress():
    gate = GateSleep()
    sink = RecordingSink(sleep=gate)
    async with runtime_with(VoiceRenderer(sink)) as runtime:
        outputs = ResponseOutputs(runtime, VOICE_OUTPUT_TOPIC, source="conversation")
        async with outputs.reply("p1", request_id="t1") as reply:
            await reply.send("Never finished.")
        await sink.wait_until(lambda s: len(s.heard()) == 1)
    assert sink.completed == set()


def test_renderer_rejects_topics_of_the_wrong_type_and_a_sink_without_play():
    with pytest.raises(
        ValueError, match=r"VoiceRenderer\.output_topic: must be a Topic carrying ResponseOutput"
    ):
        VoiceRenderer(RecordingSink(), output_topic=QUERY_TOPIC)
    with pytest.raises(ValueError, match=r"VoiceRenderer\.query_topic"):
        VoiceRenderer(RecordingSink(), query_topic=VOICE_OUTPUT_TOPIC)
    with pytest.raises(ValueError, match=r"VoiceRenderer\.interrupted_topic"):
        VoiceRenderer(RecordingSink(), interrupted_topic=QUERY_TOPIC)
    with pytest.raises(ValueError, match=r"VoiceRenderer\.sink"):
        VoiceRenderer(object())
