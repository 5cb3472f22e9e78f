"""Voice suite: what the voice front end costs, stage by stage, on the offline stack.

* VAD only (every mode): Silero VAD + the segmenter on 20 ms frames of room noise, in
  this process: CPU per participant at 50 frames/s and the frames/s one core sustains.
* Synthesis to first frame (every mode): ``AudioTopicSink`` from ``play`` to its first
  ``audio.out`` frame (espeak-ng start-up and synthesis of one sentence).
* Without the system package espeak-ng, every row that speaks (synthesis, and in full
  mode recognition and the stack) is skipped with a note naming the package.
* The whole stack (full mode only; quick skips it: the stack and Whisper take tens of
  seconds to start): ``voice_config()``'s edge stack, spoken questions (``VoiceSession``),
  per turn from the end of speech: VAD hangover (the configured trailing silence; the
  segmenter closes within one 32 ms chunk of it), the transcript (the hangover, or the
  sentence-end pause, and recognition), turn to first reply chunk, first chunk to first
  audio frame; and the same questions sent as text ``UserQuery``s. The runtime's own
  share is the part after recognition (query -> first audio frame); its ratio
  voice/text is the bar-free figure.
* 1, 4 and 8 speakers at once (full mode, ``voice_speakers``): per stage p50/p95, CPU per
  turn, and xrmq's own share of end of speech -> first audio frame (``voice_share``): the
  wait less the trailing silence, the recognition, the model (request -> the chunk that
  completed the first sentence) and the first sentence's synthesis, each as the turn's
  own stamps say (not timed apart), with each part's row beside it.
"""

from __future__ import annotations

import asyncio
import shutil
import statistics
import tempfile
import time
from pathlib import Path

from .suite import Row, Suite, SuiteContext, SuiteResult

ESPEAK_MISSING = (
    "espeak-ng is not installed (apt-get install espeak-ng): the rows that speak are skipped"
)


def _row(
    group: str,
    subject: str,
    unit: str,
    values: list[float],
    *,
    higher: bool = False,
    extra: dict[str, float] | None = None,
) -> Row:
    return Row(
        group=group,
        subject=subject,
        unit=unit,
        median=statistics.median(values),
        repetitions=values,
        higher_is_better=higher,
        extra=extra or {},
    )


def vad_cost(seconds: float) -> tuple[float, float]:
    """(% of a core per participant at 50 frames/s, frames/s per core) for VAD only."""
    import numpy as np

    from xrmq.actors.voice.pcm import float_to_pcm16, pcm16_to_float
    from xrmq.actors.voice.silero import CHUNK_SAMPLES, SileroModel, SileroStream
    from xrmq.actors.voice.vad import UtteranceSegmenter

    rng = np.random.default_rng(1)
    frames = [
        float_to_pcm16((rng.standard_normal(320) * 0.003).astype(np.float32))
        for _ in range(round(seconds * 50))
    ]
    stream, segmenter = SileroStream(SileroModel.shared()), UtteranceSegmenter()
    pending = np.zeros(0, np.float32)
    started = time.process_time()
    for index, frame in enumerate(frames):
        pending = np.concatenate([pending, pcm16_to_float(frame)])
        while pending.size >= CHUNK_SAMPLES:
            chunk, pending = pending[:CHUNK_SAMPLES], pending[CHUNK_SAMPLES:]
            segmenter.push(chunk, stream.probability(chunk), index * 20_000)
    cpu = time.process_time() - started
    return cpu / seconds * 100, len(frames) / cpu


async def synthesis_to_first_frame(count: int) -> list[float]:
    """Seconds from ``play`` to the first frame published, for ``count`` sentences."""
    from xrmq.actors.voice.audio_sink import AudioTopicSink
    from xrmq.actors.voice.ordering import Segment

    delays: list[float] = []
    first = asyncio.Event()

    async def publish(topic, message, **kwargs) -> None:
        """Frames go nowhere: the figure is the sink's own work."""

    sink = AudioTopicSink(publish, first_frame=lambda participant, segment: first.set())
    for index in range(count):
        segment = Segment(
            participant_id="p1",
            response=index,
            kind="reply",
            sources=("bench",),
            request_id="r",
            text="The spare key is in drawer twelve of the blue cabinet.",
            timestamp_us=None,
            first=True,
            urgent=False,
            token=index,
        )
        first.clear()
        started = time.monotonic()
        task = asyncio.ensure_future(sink.play(segment))
        await first.wait()
        delays.append(time.monotonic() - started)
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
    return delays


async def stack_turns(turns: int) -> tuple[list, list]:
    from xrmq.actors.edge.private_stack import PrivateStack
    from xrmq.actors.edge.voice_demo import QUESTIONS, VoiceSession, voice_config

    directory = Path(tempfile.mkdtemp(prefix="xrmq-voice-bench-"))
    voice, text = [], []
    async with (
        PrivateStack(voice_config()) as stack,
        VoiceSession(stack.bus, directory) as session,
    ):
        for index in range(turns):
            question = QUESTIONS[index % len(QUESTIONS)]
            voice.append(await session.voice_turn(index, question))
            text.append(await session.text_turn(question))
    return voice, text


BIAS_SENTENCES = (
    "Where did I leave the spare key?",
    "What temperature is the kettle set to?",
    "When does the fire drill start?",
    "What is my badge number?",
    "Which pallet is next to me at the loading dock?",
    "Tell me about the forklift battery and the charging bay.",
)
BIAS_CONTEXT = (
    "Alice is at the workbench in lab 3. Bob is at the loading dock next to pallet P-12. "
    "The kettle in lab 3 is set to 85 degrees. The fire drill starts at 14:30 at gate B. "
    "My badge number is 4471. Forklift F2 battery is at 20 percent and charging at bay 4. "
    "I left the spare key in drawer 12 of the blue cabinet."
)


def bias_wer(fit: bool = True) -> tuple[float, float, float]:
    """Mean WER of the bundled recognizer on espeak-ng speech: (biased, unbiased, s per
    utterance), Whisper's audio fitted to the utterance or padded to 30 s."""
    import subprocess

    import numpy as np

    from xrmq.actors.voice.bias import bias_prompt
    from xrmq.actors.voice.pcm import read_wav, resample
    from xrmq.actors.voice.stt import WhisperSTT
    from xrmq.actors.voice.wer import word_error_rate
    from xrmq.schemas import ContextBlock

    stt = WhisperSTT(fit_audio=fit)
    stt.load()
    prompt = bias_prompt((ContextBlock(None, BIAS_CONTEXT),))
    pad = np.zeros(3200, np.float32)
    biased, plain, spent = [], [], 0.0
    with tempfile.TemporaryDirectory() as directory:
        for index, sentence in enumerate(BIAS_SENTENCES):
            path = Path(directory) / f"{index}.wav"
            subprocess.run(["espeak-ng", "-s", "165", "-w", str(path), sentence], check=True)
            samples, rate = read_wav(path)
            audio = np.concatenate([pad, resample(samples, rate), pad])
            started = time.monotonic()
            biased.append(word_error_rate(sentence, stt._transcribe(audio, prompt)))
            spent += time.monotonic() - started
            plain.append(word_error_rate(sentence, stt._transcribe(audio, None)))
    return statistics.mean(biased), statistics.mean(plain), spent / len(BIAS_SENTENCES)


def _p(values: list[float], fraction: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(fraction * (len(ordered) - 1)))]


def run(ctx: SuiteContext) -> SuiteResult:
    from xrmq.actors.voice.vad import SegmenterSettings

    rows: list[Row] = []
    cpu, rate = [], []
    for rep in range(ctx.repetitions):
        ctx.progress(f"voice: VAD cost, repetition {rep + 1}/{ctx.repetitions}")
        percent, frames_per_s = vad_cost(3.0 if ctx.quick else 20.0)
        cpu.append(percent)
        rate.append(frames_per_s)
    rows.append(
        _row(
            "voice input, VAD only (Silero + segmenter)",
            "CPU per participant at 50 frames/s",
            "% core",
            cpu,
        )
    )
    rows.append(
        _row(
            "voice input, VAD only (Silero + segmenter)",
            "frames/s per core",
            "frames/s",
            rate,
            higher=True,
        )
    )
    notes = []
    if shutil.which("espeak-ng") is None:
        notes.append(ESPEAK_MISSING)
        return SuiteResult(rows=rows, notes=notes)
    synthesis = []
    for rep in range(ctx.repetitions):
        ctx.progress(f"voice: synthesis to first frame, repetition {rep + 1}/{ctx.repetitions}")
        delays = asyncio.run(synthesis_to_first_frame(2 if ctx.quick else 10))
        synthesis.append(statistics.median(delays) * 1000)
    rows.append(
        _row(
            "speech out",
            "synthesis to first audio.out frame p50 (espeak-ng, one sentence)",
            "ms",
            synthesis,
        )
    )
    if ctx.quick:
        notes.append(
            "quick: the stack rows (end of speech -> first audio frame, voice vs text) are skipped"
        )
        return SuiteResult(rows=rows, notes=notes)
    for fit, how in ((True, "fitted"), (False, "padded")):
        biased, plain, per_utterance = [], [], []
        for rep in range(ctx.repetitions):
            ctx.progress(f"voice: WER with and without biasing, {how}, {rep + 1}/{ctx.repetitions}")
            on, off, seconds = bias_wer(fit)
            biased.append(max(on, 1e-6))
            plain.append(max(off, 1e-6))
            per_utterance.append(seconds * 1000)
        group = f"speech-to-text, {len(BIAS_SENTENCES)} espeak-ng questions (tiny.en int8, {how})"
        rows.append(_row(group, "mean WER, context biasing on", "WER", biased))
        rows.append(_row(group, "mean WER, context biasing off", "WER", plain))
        rows.append(_row(group, "recognition time per utterance (biased)", "ms", per_utterance))
    hangover = SegmenterSettings().trailing_silence_s
    stages: dict[str, list[list[float]]] = {}
    for rep in range(ctx.repetitions):
        ctx.progress(f"voice: stack turns, repetition {rep + 1}/{ctx.repetitions}")
        voice, text = asyncio.run(stack_turns(3))
        figures = {
            "voice: VAD hangover (configured)": [hangover] * len(voice),
            # Not "transcript minus hangover": a turn whose words end a sentence ends at the
            # shorter sentence-end pause, so the recognition overlaps the hangover.
            "voice: end of speech -> transcript": [turn.to_text_s for turn in voice],
            "voice: query -> first reply chunk": [
                turn.to_chunk_s - turn.to_text_s for turn in voice
            ],
            "voice: first chunk -> first audio frame": [
                turn.to_audio_s - turn.to_chunk_s for turn in voice
            ],
            "voice: end of speech -> first audio frame": [turn.to_audio_s for turn in voice],
            "voice: query -> first audio frame (runtime share)": [
                turn.to_audio_s - turn.to_text_s for turn in voice
            ],
            "text: query -> first reply chunk": [turn.to_chunk_s for turn in text],
            "text: query -> first audio frame": [turn.to_audio_s for turn in text],
            "voice WER": [turn.wer for turn in voice],
        }
        for name, values in figures.items():
            stages.setdefault(name, []).append(values)
    for name, reps in stages.items():
        unit = "WER" if name == "voice WER" else "ms"
        scale = 1.0 if unit == "WER" else 1000.0
        p50 = [max(_p(values, 0.5) * scale, 1e-6) for values in reps]
        p95 = [_p(values, 0.95) * scale for values in reps]
        rows.append(
            _row(
                "per stage, p50 (p95 in extra)",
                name,
                unit,
                p50,
                extra={"p95": statistics.median(p95)},
            )
        )
    ratios = [
        statistics.median(voice) / statistics.median(text)
        for voice, text in zip(
            stages["voice: query -> first audio frame (runtime share)"],
            stages["text: query -> first audio frame"],
        )
    ]
    rows.append(_row("runtime share, voice / text", "query -> first audio frame", "x", ratios))
    rows += speaker_rows(ctx)
    rows += cut_rows(ctx)
    return SuiteResult(rows=rows, notes=notes)


def cut_rows(ctx: SuiteContext) -> list[Row]:
    """False cuts on the demo's questions and on sentences with a pause inside
    (``voice_cuts``), Whisper fitted and padded."""
    from .voice_cuts import false_cuts

    rows: list[Row] = []
    for fit, how in ((True, "fitted"), (False, "padded")):
        figures: dict[str, list[tuple[int, int, int]]] = {}
        for rep in range(ctx.repetitions):
            ctx.progress(f"voice: false cuts, {how}, {rep + 1}/{ctx.repetitions}")
            for name, cuts in false_cuts(fit).items():
                figures.setdefault(name, []).append((cuts.cut, cuts.sentences, cuts.early))
        for name, reps in figures.items():
            rows.append(
                _row(
                    f"false cuts, recognizer {how} (box settings: pause 0.2 s, hangover 0.4 s)",
                    f"{name}: sentences heard as two turns (of {reps[0][1]})",
                    "cuts",
                    [max(float(cut), 1e-6) for cut, _, _ in reps],
                    extra={"early ends": statistics.median(early for _, _, early in reps)},
                )
            )
    return rows


OWN_SHARE = "xrmq's own share of end of speech -> first audio frame"
"""The row of the wait less the trailing silence, recognition, model and synthesis."""


def speaker_rows(ctx: SuiteContext) -> list[Row]:
    """1, 4 and 8 speakers at once, per recognizer mode (``voice_speakers``), with xrmq's own
    share of the wait for the first audio frame and its parts (``voice_share``: each turn's
    stamps, p50 and p95)."""
    from .voice_share import PARTS
    from .voice_speakers import MODES, speaker_rounds

    rows: list[Row] = []
    for mode in MODES:
        figures: dict[tuple[int, str], list[tuple[float, float]]] = {}
        unshared: dict[int, int] = {}
        for rep in range(ctx.repetitions):
            ctx.progress(f"voice: 1, 4, 8 speakers at once, {mode}, {rep + 1}/{ctx.repetitions}")
            for turn in speaker_rounds(mode):
                for name, values in (
                    ("end of speech -> transcript", turn.to_text),
                    ("end of speech -> first reply chunk", turn.to_chunk),
                    ("end of speech -> first audio frame", turn.to_audio),
                ):
                    spread = (_p(values, 0.5) * 1000, _p(values, 0.95) * 1000)
                    figures.setdefault((turn.speakers, name), []).append(spread)
                unshared[turn.speakers] = unshared.get(turn.speakers, 0) + turn.unshared
                shares = turn.shares
                for name, values in (
                    (OWN_SHARE, [share.own_s for share in shares]),
                    *(
                        (f"{OWN_SHARE}: {part} (subtracted)", [s.parts_s[part] for s in shares])
                        for part in PARTS
                    ),
                ):
                    if values:
                        spread = (_p(values, 0.5) * 1000, _p(values, 0.95) * 1000)
                        figures.setdefault((turn.speakers, name), []).append(spread)
                cpu = turn.cpu_per_turn
                for name, seconds in (
                    ("CPU per turn, voice process", cpu.get("voice", 0.0)),
                    ("CPU per turn, all processes", sum(cpu.values())),
                ):
                    figures.setdefault((turn.speakers, name), []).append((seconds * 1000, 0.0))
        for (speakers, name), reps in figures.items():
            unit = "ms CPU" if name.startswith("CPU") else "ms"
            extra = {} if unit == "ms CPU" else {"p95": statistics.median(p95 for _, p95 in reps)}
            if name == OWN_SHARE:
                extra["turns without a share"] = float(unshared.get(speakers, 0))
            rows.append(
                _row(
                    f"{speakers} speaker(s) at once, recognizer {mode}"
                    + ("" if unit == "ms CPU" else " (p50; p95 in extra)"),
                    name,
                    unit,
                    [max(p50, 1e-6) for p50, _ in reps],
                    extra=extra,
                )
            )
    return rows


SUITE = Suite(
    "voice",
    "Voice: VAD cost, speech-to-text and speech out, end of speech to first audio frame",
    run,
)
