"""Rollover: proactive session rollover against the offline realtime server (seed 003's figure).

Two paths side by side in one run, trials of both interleaved against one server: the
**reconnect** path (the provider allows one session at once: the rollover closes the old
session, connects the new one and replays the input buffered meanwhile) and the
**standby** path (make before break: the standby is opened at the start of the baseline
turn, seeded, kept up to date, and the rollover switches to it at the boundary).

Each trial is one participant's ``RealtimeSession`` on the OpenAI Realtime adapter against
the offline server with a provider-like connect latency (1.1 s to the ready
acknowledgement): a baseline turn (speech of the trial's length, paced in real time in
60 ms frames as in the seed's 39-frame 2.35 s input, then commit) and a rollover turn
(the rollover is requested at the safe boundary after the baseline's answer, and the
same speech starts at once, so it is buffered during the reconnect and replayed in
order). Figures: reconnect success, frames sent vs delivered in order (the server's
recognizer reads each frame's tag), and the added next-turn latency (end of speech to
the first response audio, rollover turn minus the same trial's baseline turn). A
standby trial succeeds only if the rollover was a switch (no connect after the boundary).

Trials run concurrently (many sessions against one server) so 1,000 trials per length
take minutes; the server's brain answers from the tags with a short tone instead of
Whisper/OfflineLLM/espeak, which the figure does not need (both turns pay the same).
"""

from __future__ import annotations

import asyncio
import math
import statistics
import time
from collections.abc import Sequence

from bench.stats import percentile
from bench.suite import Bar, Row, Suite, SuiteContext, SuiteResult, bar

RATE = 24_000
FRAME_S = 0.06
CONNECT_LATENCY_S = 1.1
LENGTHS_S = (0.3, 0.5, 2.35)
PATHS = ("reconnect", "standby")
FULL_TRIALS = 1000
QUICK_TRIALS = 3
CONCURRENCY = 20
"""Sessions at once: more saturate the one process (its baseline turns slow down too)."""
STAGGER_S = 3.0
"""Trials start spread over this many seconds, so their reconnects do not coincide."""


def _frame(seq: int) -> bytes:
    return (seq + 1000).to_bytes(2, "little", signed=True) * int(FRAME_S * RATE)


def _tags(pcm: bytes) -> list[int]:
    size = 2 * int(FRAME_S * RATE)
    return [
        int.from_bytes(pcm[at : at + 2], "little", signed=True) - 1000
        for at in range(0, len(pcm), size)
    ]


class _TagBrain:
    """Hears frame tags (kept per transcript id), answers with their count, speaks 0.2 s."""

    def __init__(self) -> None:
        self.heard: dict[str, list[int]] = {}
        self._next = 0

    async def transcribe(self, pcm: bytes, sample_rate: int, prompt: str = "") -> str:
        self._next += 1
        key = f"turn{self._next}"
        self.heard[key] = _tags(pcm)
        return key

    async def answer(self, instructions: str, items: Sequence[tuple[str, str]]) -> str:
        return f"Heard {items[-1][1] if items else ''}."

    async def speak(self, text: str, sample_rate: int) -> bytes:
        return bytes(2 * int(0.2 * sample_rate))


class _Trial:
    def __init__(self) -> None:
        from xrmq.actors.realtime.session import SessionListener

        trial = self

        class Listener(SessionListener):
            async def user_text(self, text: str) -> None:
                trial.keys.append(text)

            async def audio(self, response_id: str, pcm: bytes) -> None:
                if trial.first_audio is None:
                    trial.first_audio = time.monotonic()

            async def response_done(self, user_text: str, done: object) -> None:
                trial.done.set()

        self.listener = Listener()
        self.keys: list[str] = []
        self.first_audio: float | None = None
        self.done = asyncio.Event()


async def _turn(session: object, trial: _Trial, frames: int, seq0: int) -> float:
    trial.first_audio = None
    trial.done.clear()
    start = time.monotonic()
    for index in range(frames):
        await asyncio.sleep(max(0.0, start + index * FRAME_S - time.monotonic()))
        await session.send_audio(_frame(index), seq0 + index)  # type: ignore[attr-defined]
    await asyncio.sleep(max(0.0, start + frames * FRAME_S - time.monotonic()))
    end = time.monotonic()  # the end of speech
    await session.commit(seq0 + frames)  # type: ignore[attr-defined]
    await trial.done.wait()
    assert trial.first_audio is not None
    return trial.first_audio - end


async def _one_trial(
    url: str, brain: _TagBrain, length_s: float, path: str = "reconnect"
) -> dict[str, float]:
    from xrmq.actors.realtime.openai_realtime import OpenAIRealtime
    from xrmq.actors.realtime.session import RealtimeSession, SessionSettings

    frames = math.ceil(round(length_s / FRAME_S, 6))
    trial = _Trial()
    standby = path == "standby"
    provider = OpenAIRealtime(
        base_url=url, ready_timeout_s=30, max_concurrent_sessions=2 if standby else 1
    )
    session = RealtimeSession(
        provider,
        instructions=lambda: "bench",
        listener=trial.listener,
        settings=SessionSettings(server_vad=False),
    )
    result = {
        "ok": 0.0,
        "sent": float(frames),
        "delivered": 0.0,
        "added_s": math.nan,
        "base_s": math.nan,
        "rolled_s": math.nan,
    }
    try:
        await session.start()
        if standby:  # opened now, its connect overlaps the baseline turn
            session.standby.prepare()
        base = await _turn(session, trial, frames, 0)
        if standby:
            await session.wait_for(lambda: session.standby.state != "connecting")
        rolling = asyncio.ensure_future(session.request_rollover("bench"))
        await asyncio.sleep(0)  # the rollover starts at this safe boundary; speech follows at once
        rolled = await _turn(session, trial, frames, 1000)
        await rolling
        heard = brain.heard.get(trial.keys[-1], []) if trial.keys else []
        in_order = heard == list(range(frames))
        result.update(
            delivered=float(len(heard)) if in_order else 0.0,
            base_s=base,
            rolled_s=rolled,
            added_s=rolled - base,
            ok=float(
                session.counts["rollovers"] == 1
                and in_order
                and session.counts["overflow"] == 0
                and session.counts["standby_switches"] == int(standby)
            ),
        )
    except Exception:
        pass
    finally:
        await session.close()
    return result


async def _trials(
    length_s: float, count: int, concurrency: int, stagger_s: float = STAGGER_S
) -> dict[str, list[dict[str, float]]]:
    """``count`` trials of each path, interleaved (so both meet the same load)."""
    from xrmq.actors.realtime.server import Faults, OfflineRealtimeServer

    brain = _TagBrain()
    async with OfflineRealtimeServer(
        brain=brain, faults=Faults(connect_latency_s=CONNECT_LATENCY_S)
    ) as server:
        gate = asyncio.Semaphore(concurrency)

        async def guarded(index: int) -> dict[str, float]:
            async with gate:
                if index < concurrency:  # the first wave is spread; later ones follow
                    await asyncio.sleep(stagger_s * index / concurrency)
                return await _one_trial(server.url, brain, length_s, PATHS[index % 2])

        every = await asyncio.gather(*(guarded(index) for index in range(2 * count)))
        return {path: list(every[number :: len(PATHS)]) for number, path in enumerate(PATHS)}


def _row(
    group: str,
    subject: str,
    unit: str,
    values: list[float],
    extra: dict[str, float],
    higher: bool = False,
    samples: list[float] | None = None,
) -> Row:
    return Row(
        group=group,
        subject=subject,
        unit=unit,
        median=statistics.median(values),
        repetitions=values,
        higher_is_better=higher,
        extra=extra,
        samples=samples or [],
    )


async def _quick(count: int) -> list[dict[str, list[dict[str, float]]]]:
    return list(
        await asyncio.gather(
            *(_trials(length, count, 2 * count, stagger_s=0.0) for length in LENGTHS_S)
        )
    )


def run(ctx: SuiteContext) -> SuiteResult:
    from xrmq.actors.runtime import run as run_loop

    total = ctx.trials or (QUICK_TRIALS if ctx.quick else FULL_TRIALS)
    per_rep = max(1, math.ceil(total / ctx.repetitions))
    rows: list[Row] = []
    bars: list[Bar] = []
    notes = [
        f"connect latency {CONNECT_LATENCY_S} s; {FRAME_S * 1000:.0f} ms frames; "
        f"{per_rep * ctx.repetitions} trials per length and path in {ctx.repetitions} "
        f"repetition(s), the two paths interleaved, up to {CONCURRENCY} sessions' trials "
        "at once against one offline server (one process)."
    ]
    runs: dict[tuple[str, float], list[list[dict[str, float]]]] = {
        (path, length): [] for path in PATHS for length in LENGTHS_S
    }
    for rep in range(ctx.repetitions):
        if ctx.quick:  # a few trials of every length at once, unstaggered: the same code path
            ctx.progress(f"rollover: every input length, {per_rep} trials of each path")
            for length, trials in zip(LENGTHS_S, run_loop(_quick(per_rep)), strict=True):
                for path in PATHS:
                    runs[path, length].append(trials[path])
            continue
        for length in LENGTHS_S:
            ctx.progress(
                f"rollover: {length} s input, repetition {rep + 1}/{ctx.repetitions}, "
                f"{per_rep} trials of each path"
            )
            trials = run_loop(_trials(length, per_rep, min(CONCURRENCY, 2 * per_rep)))
            for path in PATHS:
                runs[path, length].append(trials[path])
    for path in PATHS:
        for length in LENGTHS_S:
            _figures(path, length, runs[path, length], rows, bars, notes)
    return SuiteResult(rows=rows, bars=bars, notes=notes)


def _figures(
    path: str,
    length: float,
    reps: list[list[dict[str, float]]],
    rows: list[Row],
    bars: list[Bar],
    notes: list[str],
) -> None:
    every = [trial for rep in reps for trial in rep]
    added = [t["added_s"] * 1000 for t in every if t["ok"]]
    success = sum(t["ok"] for t in every) / len(every) * 100
    sent = sum(t["sent"] for t in every)
    delivered = sum(t["delivered"] for t in every)
    group = f"rollover, {path} path, {length} s input, {CONNECT_LATENCY_S} s connect"

    def per(fn, key="added_s"):  # one figure per repetition
        out = []
        for rep in reps:
            values = [t[key] * 1000 for t in rep if t["ok"]]
            out.append(fn(values) if values else math.nan)
        return out

    added_fig = {
        "added_p50_ms": statistics.median(added) if added else math.nan,
        "added_p95_ms": percentile(added, 0.95) if added else math.nan,
        "added_max_ms": max(added) if added else math.nan,
        "trials": float(len(every)),
    }
    rows.append(
        _row(
            group,
            "rollover success",
            "%",
            [sum(t["ok"] for t in rep) / len(rep) * 100 for rep in reps],
            {"trials": float(len(every))},
            higher=True,
        )
    )
    rows.append(
        _row(
            group,
            "frames delivered in order / sent",
            "%",
            [
                sum(t["delivered"] for t in rep) / max(1.0, sum(t["sent"] for t in rep)) * 100
                for rep in reps
            ],
            {"sent": sent, "delivered": delivered, "lost_or_reordered": sent - delivered},
            higher=True,
        )
    )
    # Latencies are rows per turn kind (a difference can be negative, a row's figure may
    # not); the added latency, rollover minus baseline per trial, is in ``extra``.
    for name, fn in (
        ("p50", statistics.median),
        ("p95", lambda v: percentile(v, 0.95)),
        ("max", max),
    ):
        rows.append(
            _row(
                group,
                f"next-turn latency {name}, rollover turn",
                "ms",
                per(fn, "rolled_s"),
                {f"added_{name}_ms": added_fig[f"added_{name}_ms"]},
                samples=[t["rolled_s"] * 1000 for t in every if t["ok"]][:2000]
                if name == "p50"
                else None,
            )
        )
        rows.append(
            _row(group, f"next-turn latency {name}, baseline turn", "ms", per(fn, "base_s"), {})
        )
    notes.append(
        f"{path} path, {length} s input, {len(every)} trials: added next-turn latency p50 "
        f"{added_fig['added_p50_ms']:.1f} ms, p95 {added_fig['added_p95_ms']:.1f} ms, "
        f"max {added_fig['added_max_ms']:.0f} ms (rollover turn minus the same "
        f"trial's baseline turn); frames {delivered:.0f}/{sent:.0f} delivered in order."
    )
    bars.append(bar(f"{path} {length} s: rollover success", success, ">=", 100.0))
    bars.append(bar(f"{path} {length} s: frames lost or reordered", sent - delivered, "<=", 0.0))
    p95 = added_fig["added_p95_ms"]
    if path == "standby":
        bars.append(bar(f"standby {length} s: added next-turn latency p95 (ms)", p95, "<=", 50.0))
    elif length == 2.35:
        bars.append(bar("reconnect 2.35 s: added next-turn latency p95 (ms)", p95, "<=", 100.0))
    else:
        notes.append(
            f"reconnect path, {length} s input: the speech ends before the "
            f"{CONNECT_LATENCY_S} s connect does, so the rest of the connect shows in the "
            "next turn."
        )


SUITE = Suite(
    "rollover",
    "Rollover: realtime session rollover, reconnect and standby paths, added latency",
    run,
)
