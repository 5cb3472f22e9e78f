"""Voice sinks: console text with timings, callbacks, recording, espeak-ng speech."""

from __future__ import annotations

import asyncio
import io
import wave

import pytest

from xrmq.actors.voice.ordering import EndReason, ResponseEnded, Segment
from xrmq.actors.voice.sinks import (
    CallbackSink,
    ConsoleSink,
    EspeakSink,
    RecordingSink,
    SinkError,
    SinkUnavailableError,
    run_espeak,
    speaking_time,
)

from system_packages import needs_espeak


def segment(
    text: str = "one two three",
    *,
    pid: str = "p1",
    response: int = 1,
    ts: int | None = None,
    token: int = 1,
    urgent=False,
):
    return Segment(pid, response, "reply", ("conversation",), "r1", text, ts, True, urgent, token)


def ended(reason: EndReason = "completed", *, pid: str = "p1", response: int = 1):
    return ResponseEnded(pid, response, "reply", ("conversation",), reason)


class RecordedSleep:
    """Injectable sleep that returns at once and remembers what it was asked for."""

    def __init__(self) -> None:
        self.durations: list[float] = []

    async def __call__(self, seconds: float) -> None:
        self.durations.append(seconds)


def test_speaking_time_is_proportional_to_words():
    assert speaking_time("one two three", 180) == pytest.approx(1.0)
    assert speaking_time("one two three four five six", 180) == pytest.approx(2.0)
    assert speaking_time("one two three", 90) == pytest.approx(2.0)


async def test_console_sink_prints_speech_with_source_and_latency_then_paces():
    out, sleep = io.StringIO(), RecordedSleep()
    sink = ConsoleSink(out, words_per_minute=180, sleep=sleep, clock=lambda: 10.0)
    await sink.play(segment("one two three", ts=9_880_000))
    assert out.getvalue() == "[p1] conversation +120ms: one two three\n"
    assert sleep.durations == [pytest.approx(1.0)]


async def test_console_sink_marks_urgent_output_and_omits_latency_without_timestamp():
    out = io.StringIO()
    await ConsoleSink(out, words_per_minute=None).play(segment("Stop!", urgent=True))
    assert out.getvalue() == "[p1] conversation !urgent: Stop!\n"


async def test_console_sink_marks_responses_that_did_not_complete():
    out = io.StringIO()
    sink = ConsoleSink(out)
    await sink.end(ended("completed"))
    await sink.end(ended("cut"))
    assert out.getvalue() == "[p1] conversation: <cut>\n"


async def test_paced_playing_stops_when_cancelled():
    release = asyncio.Event()

    async def blocking_sleep(seconds: float) -> None:
        await release.wait()

    sink = RecordingSink(sleep=blocking_sleep)
    task = asyncio.create_task(sink.play(segment(token=7)))
    await sink.wait_until(lambda s: len(s.events) == 1)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert sink.completed == set()


async def test_callback_sink_calls_sync_and_async_callbacks_and_paces():
    seen: list = []

    async def on_end(notice: ResponseEnded) -> None:
        seen.append(notice.reason)

    sleep = RecordedSleep()
    sink = CallbackSink(lambda s: seen.append(s.text), on_end, words_per_minute=120, sleep=sleep)
    await sink.play(segment("hello there"))
    await sink.end(ended("cut"))
    assert seen == ["hello there", "cut"]
    assert sleep.durations == [pytest.approx(1.0)]


async def test_callback_sink_without_a_rate_plays_as_long_as_the_callback():
    sleep = RecordedSleep()
    seen: list[str] = []

    async def render(s: Segment) -> None:
        seen.append(s.text)

    await CallbackSink(render, words_per_minute=None, sleep=sleep).play(segment("hi"))
    assert seen == ["hi"] and sleep.durations == []


async def test_recording_sink_records_segments_and_ends_in_order():
    sink = RecordingSink(words_per_minute=None)
    await sink.play(segment("a", pid="p1", token=1))
    await sink.play(segment("b", pid="p2", token=2))
    await sink.end(ended("completed", pid="p1"))
    assert sink.heard() == ["a", "b"] and sink.heard("p2") == ["b"]
    assert sink.ended("p1") == ["completed"] and sink.ended("p2") == []
    assert sink.completed == {1, 2}


def test_sinks_reject_a_non_positive_rate_naming_the_field():
    with pytest.raises(ValueError, match=r"ConsoleSink\.words_per_minute"):
        ConsoleSink(words_per_minute=0)
    with pytest.raises(ValueError, match=r"CallbackSink\.on_segment"):
        CallbackSink("not callable")


def test_espeak_sink_names_the_package_to_install_when_espeak_is_missing():
    with pytest.raises(SinkUnavailableError, match="install the 'espeak-ng' package"):
        EspeakSink(executable="espeak-ng-not-installed-here")


@needs_espeak
async def test_espeak_sink_writes_one_non_empty_wav_per_response(tmp_path):
    sleep = RecordedSleep()
    sink = EspeakSink(wav_dir=tmp_path, words_per_minute=175, sleep=sleep)
    await sink.play(segment("The kettle is on.", pid="p/1", token=1))
    await sink.play(segment("Tea in three minutes.", pid="p/1", token=2))
    await sink.end(ended("completed", pid="p/1"))
    [path] = sink.written
    assert path.parent == tmp_path and path.name == "p_1-000001-conversation.wav"
    with wave.open(str(path), "rb") as reader:
        seconds = reader.getnframes() / reader.getframerate()
    assert seconds > 0
    assert len(sleep.durations) == 2 and all(d > 0 for d in sleep.durations)
    assert seconds == pytest.approx(sum(sleep.durations), abs=1e-3)
    assert sorted(p.name for p in tmp_path.iterdir()) == [path.name]


async def test_a_one_line_console_sink_streams_a_response_onto_one_line():
    out = io.StringIO()
    sink = ConsoleSink(out, words_per_minute=None, one_line=True, clock=lambda: 10.0)
    await sink.play(segment("Hello", ts=9_880_000))
    # shown as it streams, line still open
    assert out.getvalue() == "[p1] conversation +120ms: Hello"
    await sink.play(segment("from the lab.", token=2))
    await sink.end(ended())
    await sink.play(segment("Stop", pid="p2", response=2))
    await sink.play(segment("Other", pid="p3", response=3))  # another response closes the open line
    await sink.end(ended("cut", pid="p3", response=3))
    assert out.getvalue().splitlines() == [
        "[p1] conversation +120ms: Hello from the lab.",
        "[p2] conversation: Stop",
        "[p3] conversation: Other <cut>",
    ]


@needs_espeak
async def test_espeak_sink_reports_each_wav_it_wrote(tmp_path):
    written = []
    sink = EspeakSink(
        wav_dir=tmp_path, words_per_minute=175, sleep=RecordedSleep(), on_written=written.append
    )
    await sink.play(segment("The kettle is on."))
    await sink.end(ended())
    assert written == sink.written == [tmp_path / "p1-000001-conversation.wav"]


@pytest.mark.parametrize(
    ("stderr", "status", "failure"),
    [
        ("ALSA lib pcm.c:2666:(snd_pcm_open_noupdate) Unknown PCM cards.pcm.rear", 0, None),
        ("audio open error: No such file or directory", 0, "exited with 0 but failed"),
        ("error: Connection refused", 0, "exited with 0 but failed"),
        ("audio reopen error: Device busy", 3, "exited with 3"),
    ],
)
async def test_espeak_fails_on_its_exit_status_or_its_audio_error_and_not_on_alsa_notices(
    tmp_path, stderr, status, failure
):
    fake = tmp_path / "espeak-ng"  # a test double: what espeak-ng prints, and its exit status
    fake.write_text(f"#!/bin/sh\ncat >/dev/null\necho '{stderr}' >&2\nexit {status}\n")
    fake.chmod(0o755)
    if failure is None:
        assert await run_espeak([str(fake)], "Hello.") == b""
        return
    with pytest.raises(SinkError) as raised:
        await run_espeak([str(fake)], "Hello.")
    assert str(raised.value) == f"espeak-ng {failure}: {stderr}"
