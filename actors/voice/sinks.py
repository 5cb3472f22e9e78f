"""Where the voice renderer's output goes: console text, espeak-ng speech, a callback.

A sink has two coroutines:

* ``play(segment)`` renders one :class:`~xrmq.actors.voice.ordering.Segment` and
  returns when it has *finished playing*. The renderer cancels it to cut the output
  (urgent update, new query, barge-in), so a sink must stop promptly when cancelled.
* ``end(ended)`` is told that a response that played ended (completed, cut or dropped),
  in order with the participant's segments.

Why playing takes time: on a headset, speech lasts as long as it lasts, and that is
what makes interruption and urgent updates observable. Text sinks therefore pace
themselves at ``words_per_minute`` (``None``: no pacing, playing ends when the sink's
own work is done). The ``sleep`` used for pacing is injectable so tests control time.
"""

from __future__ import annotations

import asyncio
import inspect
import re
import shutil
import sys
import time
import wave
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any, Protocol, TextIO

from .ordering import ResponseEnded, Segment

DEFAULT_WORDS_PER_MINUTE = 180.0
"""Typical conversational speech rate."""

Sleep = Callable[[float], Awaitable[Any]]


class Sink(Protocol):
    async def play(self, segment: Segment) -> None: ...

    async def end(self, ended: ResponseEnded) -> None: ...


class SinkUnavailableError(RuntimeError):
    """The sink cannot work on this machine (e.g. espeak-ng is not installed)."""


class SinkError(RuntimeError):
    """Rendering one segment failed; the renderer logs it and moves on."""


def speaking_time(text: str, words_per_minute: float) -> float:
    """Seconds it takes to say ``text`` at ``words_per_minute``."""
    return len(text.split()) * 60.0 / words_per_minute


class PacedSink:
    """Base of sinks whose "playing" lasts ``speaking_time(text, words_per_minute)``."""

    def __init__(
        self,
        *,
        words_per_minute: float | None = DEFAULT_WORDS_PER_MINUTE,
        sleep: Sleep = asyncio.sleep,
    ) -> None:
        if words_per_minute is not None and not words_per_minute > 0:
            raise ValueError(f"{type(self).__name__}.words_per_minute: must be > 0 or None")
        self.words_per_minute = words_per_minute
        self._sleep = sleep

    async def pace(self, text: str) -> None:
        """Wait as long as saying ``text`` takes (not at all without a rate)."""
        if self.words_per_minute is not None:
            await self._sleep(speaking_time(text, self.words_per_minute))


class ConsoleSink(PacedSink):
    """Prints each participant's speech as it plays, with its source and latency.

    Latency is measured from the response's originating ``timestamp_us`` (the user's
    input time) to the moment the segment starts playing, on the wall ``clock``.
    Responses that end other than by completing are marked (``<cut>``, ...). With
    ``one_line`` a response streams onto one line (its later segments appended, the line
    closed when it ends or another response plays); otherwise each segment is a line.
    """

    def __init__(
        self,
        stream: TextIO | None = None,
        *,
        words_per_minute: float | None = DEFAULT_WORDS_PER_MINUTE,
        sleep: Sleep = asyncio.sleep,
        clock: Callable[[], float] = time.time,
        one_line: bool = False,
    ) -> None:
        super().__init__(words_per_minute=words_per_minute, sleep=sleep)
        self._stream = stream
        self._clock = clock
        self.one_line = one_line
        self._open: tuple[str, int] | None = None
        """(participant, response) whose line is open, in ``one_line`` mode."""

    async def play(self, segment: Segment) -> None:
        key = (segment.participant_id, segment.response)
        if self.one_line and self._open == key:
            self._write(" " + segment.text.strip())
        else:
            label = ",".join(segment.sources) + (" !urgent" if segment.urgent else "")
            if segment.timestamp_us is not None:
                latency_ms = (self._clock() * 1e6 - segment.timestamp_us) / 1000.0
                label += f" +{latency_ms:.0f}ms"
            self._close_line()
            spoken = segment.text.strip() if self.one_line else segment.text
            text = f"[{segment.participant_id}] {label}: {spoken}"
            if self.one_line:
                self._write(text)
                self._open = key
            else:
                self._print(text)
        await self.pace(segment.text)

    async def end(self, ended: ResponseEnded) -> None:
        if self.one_line and self._open == (ended.participant_id, ended.response):
            if ended.reason != "completed":
                self._write(f" <{ended.reason}>")
            self._close_line()
        elif ended.reason != "completed":
            self._print(f"[{ended.participant_id}] {','.join(ended.sources)}: <{ended.reason}>")

    def _close_line(self) -> None:
        if self._open is not None:
            self._write("\n")
            self._open = None

    def _write(self, text: str) -> None:
        stream = self._stream or sys.stdout
        stream.write(text)
        stream.flush()

    def _print(self, line: str) -> None:
        self._close_line()
        print(line, file=self._stream or sys.stdout, flush=True)


class CallbackSink(PacedSink):
    """Hands segments (and end notices) to application callbacks, sync or async.

    With the default rate, playing lasts as long as the callback plus the speaking
    time; with ``words_per_minute=None`` it lasts as long as the callback (for an
    application that renders the audio itself and returns when it is done).
    """

    def __init__(
        self,
        on_segment: Callable[[Segment], Any],
        on_end: Callable[[ResponseEnded], Any] | None = None,
        *,
        words_per_minute: float | None = DEFAULT_WORDS_PER_MINUTE,
        sleep: Sleep = asyncio.sleep,
    ) -> None:
        if not callable(on_segment):
            raise ValueError("CallbackSink.on_segment: must be callable")
        if on_end is not None and not callable(on_end):
            raise ValueError("CallbackSink.on_end: must be callable or None")
        super().__init__(words_per_minute=words_per_minute, sleep=sleep)
        self._on_segment = on_segment
        self._on_end = on_end

    async def play(self, segment: Segment) -> None:
        result = self._on_segment(segment)
        if inspect.isawaitable(result):
            await result
        await self.pace(segment.text)

    async def end(self, ended: ResponseEnded) -> None:
        if self._on_end is not None:
            result = self._on_end(ended)
            if inspect.isawaitable(result):
                await result


class RecordingSink(PacedSink):
    """Records what was played, in order, for tests (of the renderer or of applications).

    ``events`` holds every :class:`Segment` when it starts playing and every
    :class:`ResponseEnded`; ``completed`` the tokens of segments that played to the end.
    """

    def __init__(
        self,
        *,
        words_per_minute: float | None = DEFAULT_WORDS_PER_MINUTE,
        sleep: Sleep = asyncio.sleep,
    ) -> None:
        super().__init__(words_per_minute=words_per_minute, sleep=sleep)
        self.events: list[Segment | ResponseEnded] = []
        self.completed: set[int] = set()
        self._changed = asyncio.Condition()

    async def play(self, segment: Segment) -> None:
        await self._record(segment)
        await self.pace(segment.text)
        self.completed.add(segment.token)
        async with self._changed:
            self._changed.notify_all()

    async def end(self, ended: ResponseEnded) -> None:
        await self._record(ended)

    def heard(self, participant_id: str | None = None) -> list[str]:
        """Texts played (started), optionally for one participant."""
        return [
            event.text
            for event in self.events
            if isinstance(event, Segment) and participant_id in (None, event.participant_id)
        ]

    def ended(self, participant_id: str | None = None) -> list[str]:
        """End reasons, in order, optionally for one participant."""
        return [
            event.reason
            for event in self.events
            if isinstance(event, ResponseEnded) and participant_id in (None, event.participant_id)
        ]

    async def wait_until(self, condition: Callable[[RecordingSink], bool]) -> None:
        """Return once ``condition(self)`` holds (checked after every recorded event)."""
        async with self._changed:
            await self._changed.wait_for(lambda: condition(self))

    async def _record(self, event: Segment | ResponseEnded) -> None:
        self.events.append(event)
        async with self._changed:
            self._changed.notify_all()


_UNSAFE = re.compile(r"[^A-Za-z0-9_.-]+")


class EspeakSink:
    """Real speech with espeak-ng: to the audio device, or one WAV file per response.

    Audio device: each segment is spoken by an ``espeak-ng`` process and playing lasts
    as long as the process (cancelling kills it). ``wav_dir``: each segment is
    synthesised to a part file and playing lasts the part's audio duration; when the
    response ends, its parts are joined into
    ``<participant>-<response number>-<sources>.wav`` (a cut response keeps what played),
    and ``on_written(path)`` is called with each file written.
    """

    def __init__(
        self,
        *,
        wav_dir: str | Path | None = None,
        words_per_minute: float = 175.0,
        voice: str | None = None,
        executable: str = "espeak-ng",
        sleep: Sleep = asyncio.sleep,
        on_written: Callable[[Path], None] | None = None,
    ) -> None:
        if not words_per_minute > 0:
            raise ValueError("EspeakSink.words_per_minute: must be > 0")
        found = find_espeak("EspeakSink", executable)
        self.wav_dir = Path(wav_dir) if wav_dir is not None else None
        if self.wav_dir is not None:
            self.wav_dir.mkdir(parents=True, exist_ok=True)
        self.words_per_minute = words_per_minute
        self._command = [found, "--stdin", "-s", str(round(words_per_minute))] + (
            ["-v", voice] if voice else []
        )
        self._sleep = sleep
        self._on_written = on_written
        self._parts: dict[tuple[str, int], list[Path]] = {}
        self.written: list[Path] = []
        """WAV files written so far (``wav_dir`` mode)."""

    async def play(self, segment: Segment) -> None:
        if self.wav_dir is None:
            await self._speak(segment.text, [])
            return
        parts = self._parts.setdefault((segment.participant_id, segment.response), [])
        participant = _UNSAFE.sub("_", segment.participant_id)
        part = self.wav_dir / f".{participant}-{segment.response}-{len(parts)}.part.wav"
        try:
            await self._speak(segment.text, ["-w", str(part)])
        except BaseException:
            part.unlink(missing_ok=True)
            raise
        parts.append(part)
        await self._sleep(await asyncio.to_thread(_wav_seconds, part))

    async def end(self, ended: ResponseEnded) -> None:
        parts = self._parts.pop((ended.participant_id, ended.response), [])
        if self.wav_dir is None or not parts:
            return
        participant = _UNSAFE.sub("_", ended.participant_id)
        sources = _UNSAFE.sub("_", "+".join(ended.sources))
        name = f"{participant}-{ended.response:06d}-{sources}.wav"
        target = self.wav_dir / name
        await asyncio.to_thread(_join_wavs, parts, target)
        self.written.append(target)
        if self._on_written is not None:
            self._on_written(target)

    async def _speak(self, text: str, extra: list[str]) -> None:
        await run_espeak([*self._command, *extra], text)

    async def check_device(self) -> None:
        """Open the audio device as speaking does, saying nothing: ``SinkUnavailableError``
        (espeak-ng's error and a hint) when it cannot (no sound card). Nothing to check
        with ``wav_dir``."""
        if self.wav_dir is not None:
            return
        try:
            await run_espeak(self._command, "")
        except SinkError as error:
            raise SinkUnavailableError(
                f"espeak-ng cannot play on this machine's audio device ({error}); "
                "no sound card? --wav-dir DIR writes the speech as WAV files instead"
            ) from None


def find_espeak(owner: str, executable: str = "espeak-ng") -> str:
    """The path of ``executable``, or ``SinkUnavailableError`` naming ``owner`` and the package."""
    found = shutil.which(executable)
    if found is None:
        raise SinkUnavailableError(
            f"{owner}: {executable!r} was not found on PATH; install the 'espeak-ng' package "
            "(e.g. 'apt-get install espeak-ng' or 'brew install espeak-ng')"
        )
    return found


_ESPEAK_FAILED = re.compile(r"^(audio (re)?open )?error: ", re.MULTILINE)
"""The lines espeak-ng prints when it cannot open the audio device (``audio open error: ...``,
``audio reopen error: ...``; ``error: ...`` in older versions). It may still exit 0: the
failure is not in its exit status in every version. Other lines (ALSA's notices on a
working machine) are not a failure."""


async def run_espeak(command: list[str], text: str, *, capture: bool = False) -> bytes:
    """Run espeak-ng ``command`` with ``text`` on stdin; its stdout when ``capture``, else b"".

    Cancelling kills the process (an interrupted utterance stops speaking at once); a
    non-zero exit, or an exit 0 with espeak-ng's audio error on stderr (no sound card), is
    a ``SinkError`` carrying espeak-ng's stderr.
    """
    process = await asyncio.create_subprocess_exec(
        *command,
        stdin=asyncio.subprocess.PIPE,
        stdout=asyncio.subprocess.PIPE if capture else asyncio.subprocess.DEVNULL,
        stderr=asyncio.subprocess.PIPE,
    )
    try:
        out, err = await process.communicate(text.encode())
    except asyncio.CancelledError:
        if process.returncode is None:
            process.kill()
            await process.wait()
        raise
    detail = _espeak_error(err.decode(errors="replace"))
    if process.returncode != 0:
        raise SinkError(f"espeak-ng exited with {process.returncode}: {detail}")
    if _ESPEAK_FAILED.search(detail):
        raise SinkError(f"espeak-ng exited with 0 but failed: {detail}")
    return out or b""


def _espeak_error(stderr: str) -> str:
    """espeak-ng's own error lines of ``stderr``, without the ALSA library's notices around
    them (a dozen lines on a machine without a sound card); all of it when it has none."""
    own = [line.strip() for line in stderr.splitlines() if _ESPEAK_FAILED.match(line)]
    return "; ".join(own) if own else stderr.strip()


def _wav_seconds(path: Path) -> float:
    with wave.open(str(path), "rb") as reader:
        return reader.getnframes() / reader.getframerate()


def _join_wavs(parts: list[Path], target: Path) -> None:
    with wave.open(str(parts[0]), "rb") as first:
        params = first.getparams()
    with wave.open(str(target), "wb") as writer:
        writer.setparams(params)
        for part in parts:
            with wave.open(str(part), "rb") as reader:
                writer.writeframes(reader.readframes(reader.getnframes()))
    for part in parts:
        part.unlink(missing_ok=True)
