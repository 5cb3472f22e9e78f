"""A turn's playback in its record: the voice renderer's first chunk played, first audio
frame and last frame.

Through a real box (``xrmq up``: router, conversation, context and a renderer speaking with
espeak-ng onto ``audio.out``, no sound card) a text and a spoken turn's records have the
playback stages in order after the first chunk, each duration >= 0, taken in the
renderer's process (so ``crossed``), and the text turn's OTLP trace a ``xrmq.playback``
span of the renderer. A renderer with
a sink that plays no frames reports only the first chunk played: absent, not zero. The
router's join of records and reports (``PlaybackJoin``) is checked without a box.
"""

from __future__ import annotations

import asyncio
import shutil

import pytest
from otlp_receiver import OTLPReceiver

from xrmq.actors.clock import now_us
from xrmq.actors.routing.playback_join import PlaybackJoin
from xrmq.actors.runtime import Agent, AgentRuntime, RuntimeContext, subscribe
from xrmq.actors.voice import RecordingSink, VoiceRenderer
from xrmq.schemas import PlaybackStages, ResponseOutput, UserQuery
from xrmq.topics import PLAYBACK_STAGES_TOPIC, QUERY_TOPIC, VOICE_OUTPUT_TOPIC

from edge_box import Front, UpProcess, stack_config
from recorders import TurnRecorder

pytestmark = pytest.mark.timeout(120)

PLAYBACK = ("first_chunk", "first_played", "first_frame", "last_frame")


@pytest.mark.skipif(shutil.which("espeak-ng") is None, reason="needs espeak-ng")
async def test_a_spoken_reply_s_record_has_its_playback_stages_in_order_from_the_renderer(
    tmp_path, monkeypatch
):
    monkeypatch.delenv("OTEL_EXPORTER_OTLP_ENDPOINT", raising=False)
    with OTLPReceiver() as receiver:
        extra = (
            f'[telemetry]\notlp_endpoint = "{receiver.endpoint}"\n'
            '[voice]\nspeech_out = true\ntts = "espeak"\n'
        )
        up = UpProcess(
            stack_config(tmp_path, tokens_per_second=200, extra=extra),
            env={"OTEL_BSP_SCHEDULE_DELAY": "50"},
        )
        try:
            await up.line("xrmq up: ready")
            front = Front(f"ipc://{tmp_path}/bus")
            recorder = TurnRecorder()
            front.runtime.register("turns", recorder)
            async with front:
                turn = front.turn("p1", "How warm is the kettle?")
                await turn.ended.wait()
                [record] = await recorder.until(1, timeout=60)
                await receiver.until(lambda spans: "xrmq.playback" in {s.name for s in spans})
                now = now_us()  # a spoken query, as the voice input sends it
                spoken = UserQuery(
                    "Is the kettle on?",
                    now - 900_000,
                    speech_end_us=now - 300_000,
                    transcribed_us=now,
                )
                front.runtime.send(QUERY_TOPIC, spoken, participant_id="p2", source="voice-input")
                [_, voiced] = await recorder.until(2, timeout=60)
        finally:
            up.reap()
    for turn_record in (record, voiced):
        stages = turn_record.stages()
        assert set(PLAYBACK) <= set(stages), stages
        times = [stages[stage] for stage in PLAYBACK]
        assert times == sorted(times), stages  # each duration >= 0
        assert stages["last_frame"] > stages["first_frame"]  # a spoken sentence lasts
        assert {"first_played", "first_frame", "last_frame"} <= set(turn_record.crossed)
        assert turn_record.renderer is not None and turn_record.renderer != turn_record.router
    spoken_stages = voiced.stages()
    assert list(spoken_stages)[:3] == ["speech_start", "speech_end", "transcribed"]
    assert spoken_stages["transcribed"] <= spoken_stages["first_played"]
    stages = record.stages()
    [root] = [s for s in receiver.spans if s.attributes.get("xrmq.turn.id") == record.turn_id]
    [playback] = [
        s for s in receiver.spans if s.name == "xrmq.playback" and s.trace_id == root.trace_id
    ]
    assert playback.trace_id == root.trace_id and playback.parent_span_id == root.span_id
    assert playback.resource["service.instance.id"] == record.renderer
    assert (playback.start_ns, playback.end_ns) == (
        stages["first_played"] * 1000,
        stages["last_frame"] * 1000,
    )
    assert playback.events == ["xrmq.first_frame"]
    assert root.end_ns >= playback.end_ns


class StagesRecorder(Agent):
    """Keeps every ``PlaybackStages`` a renderer reports."""

    def __init__(self) -> None:
        self.reports: asyncio.Queue[PlaybackStages] = asyncio.Queue()

    @subscribe(PLAYBACK_STAGES_TOPIC)
    async def on_stages(self, stages: PlaybackStages, ctx: RuntimeContext) -> None:
        await self.reports.put(stages)


async def test_a_sink_without_frames_reports_the_first_chunk_played_and_no_frames():
    recorder = StagesRecorder()
    runtime = AgentRuntime()
    runtime.register(
        "renderer",
        VoiceRenderer(RecordingSink(words_per_minute=None), stages_topic=PLAYBACK_STAGES_TOPIC),
    )
    runtime.register("stages", recorder)
    async with runtime:
        runtime.send(
            VOICE_OUTPUT_TOPIC,
            ResponseOutput("reply", "The kettle is warm.", request_id="turn-1"),
            participant_id="p1",
        )
        stages = await asyncio.wait_for(recorder.reports.get(), 20)
    assert stages.turn_id == "turn-1"
    assert stages.first_played_us is not None
    assert (stages.first_frame_us, stages.last_frame_us) == (None, None)


async def test_a_held_record_is_emitted_with_its_report_or_without_after_the_wait():
    emitted: dict[str, tuple[PlaybackStages | None, str | None]] = {}
    done = asyncio.Event()

    def emit_as(turn_id):
        def emit(stages, renderer):
            emitted[turn_id] = (stages, renderer)
            done.set()

        return emit

    join = PlaybackJoin(wait_s=0.01)
    stages = PlaybackStages("a", first_played_us=5)
    join.hold("a", emit_as("a"))
    assert "a" not in emitted
    join.report(stages, "renderer")
    assert emitted["a"] == (stages, "renderer")
    early = PlaybackStages("b", first_played_us=7)
    join.report(early, "renderer")  # before its turn ended
    join.hold("b", emit_as("b"))
    assert emitted["b"] == (early, "renderer")
    done.clear()
    join.hold("c", emit_as("c"))
    await asyncio.wait_for(done.wait(), 5)
    assert emitted["c"] == (None, None) and join.timed_out == 1 and len(join) == 0


def test_waiting_records_and_early_reports_are_bounded_and_counted():
    emitted: list[str] = []
    join = PlaybackJoin(wait_s=60, capacity=2)

    async def run() -> None:
        for turn_id in ("a", "b", "c"):
            join.hold(turn_id, lambda stages, renderer, turn_id=turn_id: emitted.append(turn_id))
        assert emitted == ["a"] and join.evicted == 1 and len(join) == 2
        for turn_id in ("x", "y", "z"):
            join.report(PlaybackStages(turn_id), "renderer")
        assert join.evicted == 2
        join.close()
        assert emitted == ["a", "b", "c"] and len(join) == 0

    asyncio.run(run())
