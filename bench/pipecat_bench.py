"""Pipecat suite: xrmq's voice pipeline side by side with the same pipeline built in Pipecat.

Both sides hear the same WAVs (the voice demo's questions, ``SPOKEN``, spoken by
espeak-ng once per run: 1-3 s each), sent in real time in 20 ms frames with the same lead
and tail of silence, by 1 and by 4 speakers at once; both call the same paced model server
(``pipecat_server``: OpenAI's protocol on loopback, first token after 200 ms, 40 tokens/s,
in a process of its own) and speak with the same Piper voice after the same Whisper
tiny.en weights and Silero VAD (``pipecat_pipeline``, ``pipecat_xrmq``). Each speaker
says a warm-up question first, not counted. Per side and speaker count, from the end of
the speech: the transcript, the first reply chunk and the first audio frame, p50 (the
row's figure, the median over repetitions of each repetition's p50) and p95 (pooled).

Each side's "after the model" row at 1 speaker is end of speech to first audio frame
minus end of speech to transcript (VAD silence and recognition) and the model's time
from the request's arrival to the chunk that ends the first sentence (the server stamps
both): the synthesis of that sentence and the framework's own work; the synthesis timed
apart in this process (the same Piper voice) is in the row's extra, for reading Pipecat's.
xrmq's own share (the bar) is read from each turn's own stamps instead (``voice_share``:
the turn's trailing silence, recognition, model and first-sentence synthesis as they
happened, subtracted from its wait), p50 with p95 and each part in the row's extra.

Bars (read, not tuned for): xrmq's first audio p50 at most Pipecat's at 1 and at 4
speakers; xrmq's transcript p50 <= 300 ms at 1 speaker; xrmq's own share p50 <= 30 ms.

``--quick`` (CI): one speaker, one question, no warm-up, one side after the other; the
figures mean nothing. Without ``pipecat-ai`` or espeak-ng the suite fails naming them.
"""

from __future__ import annotations

import asyncio
import importlib.util
import shutil
import statistics
import tempfile
import time
from pathlib import Path

from .pipecat_pipeline import PIPECAT_MISSING
from .stats import percentile
from .suite import Bar, Row, SuiteContext, SuiteResult, bar
from .suite import Suite as _Suite
from .voice_share import PARTS, Share

LEAD_S, TAIL_S = 0.3, 1.0
STAGES = ("transcript", "first reply chunk", "first audio frame")


def questions(directory: Path, count: int) -> list[tuple[bytes, float]]:
    """The voice demo's questions as 16 kHz PCM16 with the lead and tail: (pcm, speech s)."""
    from xrmq.actors.edge.voice_demo import QUESTIONS, speak
    from xrmq.actors.voice.mic import wav_pcm

    spoken = []
    for index, text in enumerate(QUESTIONS[:count]):
        pcm = wav_pcm(speak(text, directory, f"q{index}"), lead_s=LEAD_S, tail_s=TAIL_S)
        spoken.append((pcm, len(pcm) / 32_000 - LEAD_S - TAIL_S))
    return spoken


def synthesis_s(sentence: str, times: int = 5) -> float:
    """Median seconds Piper (the bundled voice) takes to say ``sentence``, warm (two
    untimed runs first: onnxruntime's first runs of a new length are slower)."""
    from xrmq.actors.voice.piper import PiperSynthesizer

    voice = PiperSynthesizer()
    voice.load()
    voice._speak(sentence)
    voice._speak(sentence)
    spent = []
    for _ in range(times):
        began = time.perf_counter()
        voice._speak(sentence)
        spent.append(time.perf_counter() - began)
    return statistics.median(spent)


def _after_model(turns: list[tuple[float, float, float, str, float]], served: list) -> list[float]:
    """Per turn: to first audio - to transcript - the model's first sentence (the share and
    the synthesis). Each turn's request is the first the server saw after its transcript
    (1 speaker: one request at a time)."""
    left = []
    for to_text, _, to_audio, _, heard_at in turns:
        after = [record for record in served if record.arrived >= heard_at - 0.05]
        if not after or not after[0].first_sentence_sent:
            continue
        model_s = after[0].first_sentence_sent - after[0].arrived
        left.append(to_audio - to_text - model_s)
    return left


def _side(
    side: str,
    speakers: int,
    spoken: list[tuple[bytes, float]],
    warm_up: bool,
    model,
    shares: list[Share | None] | None = None,
) -> list[tuple[float, float, float, str, float]]:
    import numpy as np

    if side == "xrmq":
        from .pipecat_xrmq import run_xrmq

        return asyncio.run(
            run_xrmq(
                model.api_base, speakers, spoken, lead_s=LEAD_S, warm_up=warm_up, shares=shares
            )
        )
    from .pipecat_pipeline import run_pipecat

    arrays = [(np.frombuffer(pcm, np.int16), speech_s) for pcm, speech_s in spoken]
    stop_s = _trailing_silence_s()
    return asyncio.run(
        run_pipecat(model.api_base, speakers, arrays, lead_s=LEAD_S, stop_s=stop_s, warm_up=warm_up)
    )


def _trailing_silence_s() -> float:
    from xrmq.actors.voice.config import VoiceConfig

    return VoiceConfig().trailing_silence_s


def run(ctx: SuiteContext) -> SuiteResult:
    if importlib.util.find_spec("pipecat") is None:
        raise RuntimeError(PIPECAT_MISSING)
    if shutil.which("espeak-ng") is None:
        raise RuntimeError("espeak-ng is not installed (apt-get install espeak-ng): no questions")
    from .pipecat_server import ANSWER, PacedModelProcess

    counts = (1,) if ctx.quick else (1, 4)
    directory = Path(tempfile.mkdtemp(prefix="xrmq-pipecat-bench-"))
    spoken = questions(directory, 1 if ctx.quick else 3)
    first_sentence = ANSWER.split(". ")[0] + "."
    # (side, speakers) -> per repetition, the turns
    turns: dict[tuple[str, int], list[list[tuple[float, float, float, str, float]]]] = {}
    after_model: dict[str, list[list[float]]] = {"xrmq": [], "pipecat": []}
    shares: list[list[Share | None]] = []
    synth: list[float] = []
    with PacedModelProcess() as model:
        for rep in range(ctx.repetitions):
            synth.append(synthesis_s(first_sentence))
            for speakers in counts:
                sides = ("xrmq", "pipecat") if rep % 2 == 0 else ("pipecat", "xrmq")
                for side in sides:
                    ctx.progress(
                        f"pipecat: {side}, {speakers} speaker(s), "
                        f"repetition {rep + 1}/{ctx.repetitions}"
                    )
                    seen = len(model.served)
                    stamped: list[Share | None] | None = None
                    if side == "xrmq" and speakers == 1:
                        stamped = []
                        shares.append(stamped)
                    got = _side(side, speakers, spoken, not ctx.quick, model, stamped)
                    turns.setdefault((side, speakers), []).append(got)
                    if speakers == 1:
                        time.sleep(0.2)  # the last request's record is on its way
                        after_model[side].append(_after_model(got, model.served[seen:]))
    rows: list[Row] = []
    for speakers in counts:
        for stage_index, stage in enumerate(STAGES):
            for side in ("xrmq", "pipecat"):
                reps = [
                    [turn[:3][stage_index] * 1000 for turn in rep]
                    for rep in turns[(side, speakers)]
                ]
                pooled = [value for rep in reps for value in rep]
                rows.append(
                    Row(
                        group=f"end of speech -> {stage}, p50 (p95 in extra)",
                        subject=f"{side}, {speakers} speaker{'s' if speakers > 1 else ''}",
                        unit="ms",
                        median=max(statistics.median(percentile(rep, 0.5) for rep in reps), 1e-6),
                        repetitions=[max(percentile(rep, 0.5), 1e-6) for rep in reps],
                        higher_is_better=False,
                        extra={"p95": percentile(pooled, 0.95), "turns": float(len(pooled))},
                        samples=sorted(pooled),
                    )
                )
    synth_ms = statistics.median(synth) * 1000
    for side in ("xrmq", "pipecat"):
        reps = [[value * 1000 for value in rep] for rep in after_model[side] if rep]
        if reps:
            p50 = statistics.median(percentile(rep, 0.5) for rep in reps)
            rows.append(
                Row(
                    group="after the model at 1 speaker, p50: to first audio - to transcript - "
                    "the model's first sentence",
                    subject=side,
                    unit="ms",
                    median=max(p50, 1e-6),
                    repetitions=[max(percentile(rep, 0.5), 1e-6) for rep in reps],
                    higher_is_better=False,
                    samples=sorted(value for rep in reps for value in rep),
                    extra={"synthesis of the first sentence ms (timed apart)": synth_ms},
                )
            )
    rows += _share_rows(shares)
    heard = {
        side: sorted({turn[3].strip() for rep in turns[(side, 1)] for turn in rep})
        for side in ("xrmq", "pipecat")
    }
    notes = [
        f"same WAVs ({len(spoken)} espeak-ng questions, {min(s for _, s in spoken):.1f}-"
        f"{max(s for _, s in spoken):.1f} s) and the same paced model (200 ms first token, "
        "40 tokens/s) for both sides; Pipecat runs one pipeline per speaker in the bench "
        "process, xrmq its edge stack (voice, conversation, context, router... processes)",
        f"heard at 1 speaker: xrmq {heard['xrmq']}, Pipecat {heard['pipecat']}",
        "xrmq's own share: each turn's wait less its own silence, recognition, model and "
        "synthesis stamps; Pipecat has no such stamps: compare the two sides' 'after the "
        "model' rows",
    ]
    if ctx.quick:
        notes.append("quick: 1 speaker, 1 question, no warm-up; the figures mean nothing")
        return SuiteResult(rows=rows, notes=notes)
    return SuiteResult(rows=rows, bars=_bars(rows), notes=notes)


def _bars(rows: list[Row]) -> list[Bar]:
    by = {(row.group.split(",")[0], row.subject): row.median for row in rows}
    audio, text = "end of speech -> first audio frame", "end of speech -> transcript"
    bars = [
        bar(
            f"xrmq first audio p50 / Pipecat's, {n}",
            by[(audio, f"xrmq, {n}")] / by[(audio, f"pipecat, {n}")],
            "<=",
            1.0,
        )
        for n in ("1 speaker", "4 speakers")
    ]
    bars.append(
        bar("xrmq end of speech -> transcript p50 (ms)", by[(text, "xrmq, 1 speaker")], "<=", 300)
    )
    share = [row.median for row in rows if row.group.startswith(SHARE_GROUP)]
    if share:
        bars.append(
            bar(
                "xrmq own share p50 (ms)",
                share[0],
                "<=",
                30,
                "end of speech -> first audio frame less each turn's own trailing silence, "
                "recognition, model and first-sentence synthesis stamps",
            )
        )
    return bars


SHARE_GROUP = "xrmq's own share at 1 speaker, p50 (p95 and parts in extra)"


def _share_rows(shares: list[list[Share | None]]) -> list[Row]:
    """xrmq's own share at 1 speaker from each turn's stamps: p50 per repetition, p95 and
    each part's p50 pooled, and the turns without a share."""
    reps = [[share for share in rep if share is not None] for rep in shares]
    pooled = [share for rep in reps for share in rep]
    if not pooled:
        return []
    own = [[share.own_s * 1000 for share in rep] for rep in reps if rep]
    extra = {"p95": percentile([share.own_s * 1000 for share in pooled], 0.95)}
    for part in PARTS:
        extra[f"{part} p50 ms"] = percentile([share.parts_s[part] * 1000 for share in pooled], 0.5)
    extra["turns without a share"] = float(sum(share is None for rep in shares for share in rep))
    return [
        Row(
            group=SHARE_GROUP,
            subject="xrmq: end of speech -> first audio frame less silence, recognition, "
            "model and synthesis",
            unit="ms",
            median=max(statistics.median(percentile(rep, 0.5) for rep in own), 1e-6),
            repetitions=[max(percentile(rep, 0.5), 1e-6) for rep in own],
            higher_is_better=False,
            extra=extra,
            samples=sorted(share.own_s * 1000 for share in pooled),
        )
    ]


SUITE = _Suite(
    "pipecat",
    "Pipecat side by side: end of speech to transcript and to first audio, 1 and 4 speakers",
    run,
)
