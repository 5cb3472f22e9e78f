"""Every script in examples/ runs: against a real broker process where it needs a bus."""

from __future__ import annotations

import ast
import asyncio
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from xrmq.actors.runtime import Agent, AgentRuntime, RuntimeContext
from xrmq.schemas import ResponseOutput
from xrmq.topics import VOICE_OUTPUT_TOPIC

from buses import broker_process, expect_line, reap
from recorders import ContextRecorder
from system_packages import needs_espeak

pytestmark = pytest.mark.timeout(60)

EXAMPLES = Path(__file__).parent.parent / "examples"
ENV = {**os.environ, "XRMQ_LOG_LEVEL": "WARNING"}


def example(name: str, *args: str, **kwargs) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, str(EXAMPLES / name), *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=ENV,
        **kwargs,
    )


async def run_publisher(
    script: str, topics: tuple[str, ...], count: int, *args: str
) -> tuple[list[tuple], str]:
    """Run a publishing example against a fresh broker; return what a subscriber received."""
    with broker_process() as bus:
        recorder = ContextRecorder(*topics)
        runtime = AgentRuntime(bus)
        runtime.register("recorder", recorder)
        async with runtime:
            proc = example(script, bus, *args)
            try:
                stdout, stderr = await asyncio.to_thread(proc.communicate, timeout=30)
            finally:
                reap(proc)
            assert proc.returncode == 0, stderr[-3000:]
            await recorder.until(count)
    return recorder.updates, stdout


async def test_sensor_publisher_publishes_the_scene_and_a_note():
    updates, stdout = await run_publisher("sensor_publisher.py", ("scene", "notes"), 2)
    assert updates == [
        ("scene", "p1", "camera", "p1 is at the workbench in lab 3."),
        ("notes", "p1", "kettle", "The kettle in lab 3 is set to 85 degrees."),
    ]
    assert stdout == "sensor: published scene and notes for p1\n"


async def test_foreign_client_publishes_a_context_update_with_pyzmq_and_msgpack_only():
    tree = ast.parse((EXAMPLES / "foreign_client.py").read_text())
    imported = {
        alias.name.split(".")[0]
        for node in ast.walk(tree)
        if isinstance(node, ast.Import)
        for alias in node.names
    }
    imported |= {
        node.module.split(".")[0] for node in ast.walk(tree) if isinstance(node, ast.ImportFrom)
    }
    assert imported - set(sys.stdlib_module_names) == {"msgspec", "zmq"}  # no xrmq
    updates, stdout = await run_publisher(
        "foreign_client.py", ("notes",), 1, "p7", "Reagent kit R-88 is in fridge 2."
    )
    assert updates == [("notes", "p7", "foreign-client", "Reagent kit R-88 is in fridge 2.")]
    assert stdout == "foreign client: published notes for p7: Reagent kit R-88 is in fridge 2.\n"


async def test_foreign_client_sends_a_wav_as_audio_frames_with_pyzmq_and_msgpack_only(tmp_path):
    import math
    import wave

    from xrmq.schemas import AudioFrame
    from xrmq.topics import AUDIO_IN_TOPIC

    path = tmp_path / "tone.wav"
    samples = b"".join(
        int(8000 * math.sin(i / 10)).to_bytes(2, "little", signed=True) for i in range(8000)
    )
    with wave.open(str(path), "wb") as writer:
        writer.setnchannels(1)
        writer.setsampwidth(2)
        writer.setframerate(16000)
        writer.writeframes(samples)

    class Frames(Agent):
        def __init__(self) -> None:
            self.frames: list[tuple[str | None, AudioFrame]] = []
            self.all = asyncio.Event()

        def handlers(self):
            return {AUDIO_IN_TOPIC: self.on_frame}

        async def on_frame(self, frame: AudioFrame, ctx: RuntimeContext) -> None:
            self.frames.append((ctx.participant_id, frame))
            if len(self.frames) == 25:
                self.all.set()

    with broker_process() as bus:
        runtime = AgentRuntime(bus)
        recorder = runtime.register("frames", Frames())
        async with runtime:
            proc = example("foreign_client.py", bus, "p7", "Speech follows.", str(path))
            try:
                stdout, stderr = await asyncio.to_thread(proc.communicate, timeout=30)
            finally:
                reap(proc)
            assert proc.returncode == 0, stderr[-3000:]
            await asyncio.wait_for(recorder.all.wait(), 20)
            metrics = runtime.metrics()
    assert "sent 25 audio frames for p7" in stdout
    assert [frame.frame for _, frame in recorder.frames] == list(range(25))
    assert {participant for participant, _ in recorder.frames} == {"p7"} and metrics.gaps == 0
    assert b"".join(frame.pcm for _, frame in recorder.frames) == samples


async def test_voice_renderer_prints_a_streamed_reply_as_one_subtitle_and_stops_on_sigterm():
    with broker_process() as bus:
        renderer = example("voice_renderer.py", bus)
        try:
            await asyncio.to_thread(expect_line, renderer, "voice renderer: ready")
            async with AgentRuntime(bus) as runtime:
                for text, final in (("The meeting", False), (" is at 15:30.", False), ("", True)):
                    await runtime.publish(
                        VOICE_OUTPUT_TOPIC,
                        ResponseOutput("reply", text, "q1", response_id="r1", final=final),
                        participant_id="p1",
                        source="conversation",
                    )
                line = await asyncio.to_thread(expect_line, renderer, "subtitle for ")
            renderer.send_signal(signal.SIGTERM)
            assert await asyncio.to_thread(renderer.wait, 20) == 0
        finally:
            reap(renderer)
    assert line == "subtitle for p1 (conversation): The meeting is at 15:30."


def test_seed_example_runs_and_answers_from_the_scripted_model():
    proc = example("seed_example.py")
    try:
        stdout, stderr = proc.communicate(timeout=30)
    finally:
        reap(proc)
    assert proc.returncode == 0, stderr[-3000:]
    assert stdout == "answered by conversation: The calibration meeting is at 15:30 in lab 2.\n"


def test_an_example_prints_its_result_alone_and_its_info_logs_only_when_asked():
    quiet = {key: value for key, value in os.environ.items() if key != "XRMQ_LOG_LEVEL"}
    runs = {}
    for asked, env in (("default", quiet), ("INFO", {**quiet, "XRMQ_LOG_LEVEL": "INFO"})):
        runs[asked] = subprocess.run(
            [sys.executable, str(EXAMPLES / "seed_example.py")],
            capture_output=True,
            text=True,
            env=env,
            timeout=30,
        )
        assert runs[asked].returncode == 0, runs[asked].stderr[-3000:]
    answer = "answered by conversation: The calibration meeting is at 15:30 in lab 2.\n"
    assert runs["default"].stdout == answer and runs["default"].stderr == ""
    assert runs["INFO"].stdout == answer and '"event": "runtime.ready"' in runs["INFO"].stderr


@needs_espeak
def test_the_realtime_session_example_rolls_over_and_still_knows_the_first_facts() -> None:
    proc = example("realtime_session.py")
    stdout, stderr = proc.communicate(timeout=50)
    assert proc.returncode == 0, stderr[-2000:]
    assert "server truncated 0 items" in stdout and stdout.rstrip().endswith("ok")
    assert "rollover to epoch 2" in stdout
