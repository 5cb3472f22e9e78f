"""Turn suite: turn to first reply chunk at the renderer, across OS processes.

Processes (``turn_rig.Deployment``): an ``xrmq bus`` broker; the context sections; the
compaction workers; the conversation (``Conversation`` over a split ``ContextManager``
replica, served as "conversation"); the router (``AgentRouter`` with
``remote("conversation")``); the client, which publishes each ``UserQuery`` and plays
the replies through a ``VoiceRenderer``; the raw pyzmq baselines through the same
broker: a ping-pong pair (back to back) and the three processes of ``bench.turn_ring``
(paced like the turns: the turn's 3-hop ring and a 2-hop round trip); and the tap
(``bench.turn_tap``). A turn's latency is measured in the client, from just before it
publishes the query to the renderer playing the reply's first segment
(``time.monotonic_ns`` in one process). Several participants talk at once, each
waiting for its turn's final frame before the next turn.

- zero-delay model (``OfflineLLM(time_to_first_token_s=0, tokens_per_second=0)``):
  the runtime's own overhead, p50 and p99, and their ratios to the raw pyzmq baselines
  measured in the same repetition: ``x raw`` to the back-to-back round trip (the bars'
  baseline), ``x ring`` to the paced 3-hop ring (the like-for-like floor: the same
  serial crossings, each paying an idle process's wake-up); the CPU each process spends
  per turn; and the broker crossings each turn makes from its query to its first chunk,
  counted by the tap in an untimed pass after the timed repetitions (subscribed, the
  tap would load the cores during the very turns being timed);
- OfflineLLM's defaults (250 ms to the first token, 40 tokens/s): what a user waits for
  with a small local model; the conversation process is restarted on that model.
- warm start: the first turn after a conversation restart against the second, on a
  ``LiteLLMService`` over litellm's ``mock_response`` (litellm's real import and code
  path, no network), with the model prepared before the process reports ready (what
  the edge box does) and, for contrast, without (litellm imported by the first turn).
  ``--quick`` does not restart again: it measures the first turns of a new participant on
  the conversation the previous phase restarted (OfflineLLM), to stay quick.

Repetition 0 warms up and is discarded; figures are medians over the repetitions.
"""

from __future__ import annotations

from collections import Counter
from typing import Any

from xrmq.actors.models import OfflineLLM

from .stats import median, percentile, thin
from .suite import Row, Suite, SuiteContext, SuiteResult
from .turn_rig import Config, Deployment

PARTICIPANTS = 4
PAUSE_MS = 20


def run(ctx: SuiteContext) -> SuiteResult:
    turns = 2 if ctx.quick else 75  # per participant and repetition: 8 or 300 turns
    realistic_turns = 1 if ctx.quick else 5
    asks = 100 if ctx.quick else 2_000
    defaults = OfflineLLM()
    realistic = (defaults.time_to_first_token_s, defaults.tokens_per_second)
    participants = [f"p{i}" for i in range(PARTICIPANTS)]
    raw_p50, raw_p99, p50, p99, bus_p50, rtts, firsts = [], [], [], [], [], [], []
    ring_p50, ring_p99, rings, paced_p50, paced_p99, paced = [], [], [], [], [], []
    cpu: dict[str, list[float]] = {}
    real_p50, real_p99, real_firsts = [], [], []
    failed = ring_failed = 0
    with Deployment(Config()) as deployment:
        ctx.progress(
            f"turn: {len(deployment.workers)} processes up; {turns * PARTICIPANTS} zero-delay "
            "turns, as many paced raw rings and 2-hop round trips, "
            f"and {asks} back-to-back raw round trips per repetition"
        )
        for rep in range(ctx.repetitions + 1):  # repetition 0 warms up
            raw = deployment.raw_rtt(asks)
            if rep % 2:  # neither the turns nor the paced baselines always go first
                baselines = paced_baselines(deployment, turns, participants)
            before = deployment.cpu_ns()
            result = deployment.turns(turns, participants, PAUSE_MS)
            after = deployment.cpu_ns()
            if not rep % 2:
                baselines = paced_baselines(deployment, turns, participants)
            if rep == 0:
                continue
            failed += result["failed"]
            ring_failed += baselines["ring"]["failed"] + baselines["paced"]["failed"]
            raw_p50.append(percentile(raw, 0.5))
            raw_p99.append(percentile(raw, 0.99))
            p50.append(percentile(result["first_us"], 0.5))
            p99.append(percentile(result["first_us"], 0.99))
            bus_p50.append(percentile(result["bus_us"], 0.5))
            ring, paced_rtt = baselines["ring"]["rtt_us"], baselines["paced"]["rtt_us"]
            ring_p50.append(percentile(ring, 0.5))
            ring_p99.append(percentile(ring, 0.99))
            paced_p50.append(percentile(paced_rtt, 0.5))
            paced_p99.append(percentile(paced_rtt, 0.99))
            rtts += raw
            rings += ring
            paced += paced_rtt
            firsts += result["first_us"]
            timed = len(result["first_us"]) + result["failed"]
            for name in after:
                cpu.setdefault(name, []).append((after[name] - before[name]) / 1000 / timed)
            ctx.progress(
                f"turn: rep {rep}/{ctx.repetitions} zero-delay p50 {p50[-1]:,.0f} us p99 "
                f"{p99[-1]:,.0f} us; raw round trip p50 {raw_p50[-1]:.0f} us; "
                f"paced raw ring p50 {ring_p50[-1]:,.0f} us p99 {ring_p99[-1]:,.0f} us; "
                f"cpu per turn {sum(c[-1] for c in cpu.values()):,.0f} us"
            )
        # The counting pass: untimed turns with the tap subscribed (it loads the cores, so
        # the timed turns above ran without it).
        deployment.start_counting()
        counted = deployment.turns(turns, participants, PAUSE_MS)
        tapped = deployment.crossings()
        failed += counted["failed"]
        crossings: list[int] = tapped["crossings"]
        by_topic: Counter[str] = Counter(tapped["by_topic"])
        ctx.progress(
            f"turn: counting pass, {len(crossings)} turns, crossings p50 "
            f"{median(crossings) if crossings else float('nan')}"
        )
        deployment.restart_conversation(realistic)
        realistic_participants = [f"r{i}" for i in range(2 * PARTICIPANTS)]
        for rep in range(ctx.repetitions):
            result = deployment.turns(realistic_turns, realistic_participants, PAUSE_MS)
            failed += result["failed"]
            ms = [value / 1000 for value in result["first_us"]]
            real_p50.append(percentile(ms, 0.5))
            real_p99.append(percentile(ms, 0.99))
            real_firsts += ms
            ctx.progress(
                f"turn: rep {rep + 1}/{ctx.repetitions} OfflineLLM defaults p50 {real_p50[-1]:.1f} "
                "ms "
                f"p99 {real_p99[-1]:.1f} ms"
            )
        warm = warm_start(ctx, deployment)
    x50 = [x / r for x, r in zip(p50, raw_p50)]
    x99 = [x / r for x, r in zip(p99, raw_p99)]
    ring50 = [x / r for x, r in zip(p50, ring_p50)]
    ring99 = [x / r for x, r in zip(p99, ring_p99)]
    cpu_total = [sum(per_rep) for per_rep in zip(*cpu.values())]
    group = "turn to first chunk at the renderer, zero-delay model"
    rows = [
        _baseline(group, "raw pyzmq round trip (same broker)", raw_p50, raw_p99, rtts),
        Row(
            group=group,
            subject="xrmq turn path",
            unit="us",
            median=median(p50),
            repetitions=p50,
            higher_is_better=False,
            samples=thin(firsts),
            extra={
                "p99 us": median(p99),
                "x raw p50": median(x50),
                "x raw p99": median(x99),
                "x ring p50": median(ring50),
                "x ring p99": median(ring99),
                "first fragment in client p50 us": median(bus_p50),
                "crossings per turn p50": median(crossings) if crossings else float("nan"),
                "crossings per turn max": max(crossings, default=float("nan")),
                "counting pass (tap on) p50 us": (
                    percentile(counted["first_us"], 0.5) if counted["first_us"] else float("nan")
                ),
            },
        ),
        _baseline(
            group, "raw pyzmq 2-hop round trip, paced like the turns", paced_p50, paced_p99, paced
        ),
        _baseline(
            group,
            "raw pyzmq 3-hop ring (the turn's crossings), paced like the turns",
            ring_p50,
            ring_p99,
            rings,
        ),
        Row(
            group="CPU per zero-delay turn, each process over the timed turns",
            subject="all processes of the turn path",
            unit="us",
            median=median(cpu_total),
            repetitions=cpu_total,
            higher_is_better=False,
            extra={f"{name} us": median(values) for name, values in cpu.items()},
        ),
        Row(
            group="turn to first chunk at the renderer, OfflineLLM defaults",
            subject="xrmq turn path",
            unit="ms",
            median=median(real_p50),
            repetitions=real_p50,
            higher_is_better=False,
            samples=thin(real_firsts),
            extra={"p99 ms": median(real_p99), "model first token ms": realistic[0] * 1000},
        ),
        *warm,
    ]
    notes = [
        f"{PARTICIPANTS} participants at once, {turns} sequential turns each per repetition "
        "(zero-delay), "
        f"think time before each turn uniform in [0, {2 * PAUSE_MS}] ms; "
        f"{2 * PARTICIPANTS} participants x {realistic_turns} turns (OfflineLLM defaults: "
        f"{realistic[0] * 1000:.0f} ms to first token, {realistic[1]:g} tokens/s)",
        "median column: p50 per repetition, median over repetitions; x raw (back-to-back raw "
        "round trip) and x ring (the paced raw 3-hop ring, bench.turn_ring): paired "
        "per-repetition ratios; the paced baselines run before the turns in odd repetitions, "
        "after them in even ones",
        "CPU per turn: schedstat CPU of each process over the timed turns / turns (idle "
        "wake-ups included); the tap is not subscribed during the timed turns",
        f"crossings: messages through the broker from the query to the turn's first nonblank "
        f"chunk, both included, in an untimed counting pass of {len(crossings)} turns with the "
        "tap subscribed (bench.turn_tap); per topic: "
        + ", ".join(
            f"{topic} {count / max(len(crossings), 1):.2f}"
            for topic, count in sorted(by_topic.items())
        ),
    ]
    if failed:
        notes.append(
            f"{failed} turns failed (no completed reply within the timeout) and are not in the "
            "figures"
        )
    if ring_failed:
        notes.append(f"{ring_failed} paced raw round trips got no reply and are not in the figures")
    if tapped["outside"]:
        notes.append(f"the tap read {tapped['outside']} turn-path messages outside its pass")
    return SuiteResult(rows=rows, notes=notes)


def paced_baselines(
    deployment: Deployment, turns: int, participants: list[str]
) -> dict[str, dict[str, Any]]:
    """The raw 3-hop ring and 2-hop round trip, as many as the turns and paced like them."""
    return {
        "ring": deployment.ring(turns, participants, PAUSE_MS),
        "paced": deployment.paced_rtt(turns, participants, PAUSE_MS),
    }


def warm_start(ctx: SuiteContext, deployment: Deployment) -> list[Row]:
    """First and second turn after each restart of the conversation, per repetition (ms)."""
    litellm = not ctx.quick
    variants = (True, False) if litellm else (True,)
    first: dict[bool, list[float]] = {prepared: [] for prepared in variants}
    second: dict[bool, list[float]] = {prepared: [] for prepared in variants}
    for rep in range(ctx.repetitions):
        for prepared in variants:
            if litellm:  # --quick keeps CI's quick run short: the process the last phase restarted
                deployment.restart_conversation((0.0, 0.0), litellm=True, prepare=prepared)
            participant = f"w{rep}{'p' if prepared else 'c'}"
            for into in (first, second):
                result = deployment.turns(1, [participant], 0)
                into[prepared].append(
                    result["first_us"][0] / 1000 if result["first_us"] else float("nan")
                )
            ctx.progress(
                f"turn: rep {rep + 1}/{ctx.repetitions} after a restart "
                f"({'prepared' if prepared else 'cold'}): first turn {first[prepared][-1]:.1f} ms, "
                f"second {second[prepared][-1]:.1f} ms"
            )
    model = "litellm mock model" if litellm else "OfflineLLM defaults, no new restart (--quick)"
    group = f"first turn after a conversation restart, {model}"
    rows = []
    for prepared in variants:
        ratios = [a / b for a, b in zip(first[prepared], second[prepared])]
        subject = (
            "model prepared before ready"
            if prepared
            else "model not prepared (imported by the first turn)"
        )
        rows.append(
            Row(
                group=group,
                subject=subject,
                unit="ms",
                median=median(first[prepared]),
                repetitions=first[prepared],
                higher_is_better=False,
                extra={
                    "second turn ms": median(second[prepared]),
                    "first / second": median(ratios),
                },
            )
        )
    return rows


SUITE = Suite("turn", "Turn: query to first reply chunk at the renderer, across processes", run)


def _baseline(
    group: str, subject: str, p50: list[float], p99: list[float], samples: list[float]
) -> Row:
    """A raw pyzmq latency row: p50 per repetition, the median p99 beside it."""
    return Row(
        group=group,
        subject=subject,
        unit="us",
        median=median(p50),
        repetitions=p50,
        higher_is_better=False,
        extra={"p99 us": median(p99)},
        samples=thin(samples),
    )
