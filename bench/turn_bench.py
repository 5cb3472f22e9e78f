"""Turn suite: turn to first reply chunk at the renderer, across OS processes.

Processes (``turn_rig.Deployment``): an ``xrmq bus`` broker; the context sections; the
compaction workers; the conversation (``Conversation`` over a split ``ContextManager``
replica, served as "conversation"); the router (``AgentRouter`` with
``remote("conversation")``); the client, which publishes each ``UserQuery`` and plays
the replies through a ``VoiceRenderer``; and a raw pyzmq ping-pong pair through the
same broker. A turn's latency is measured in the client, from just before it
publishes the query to the renderer playing the reply's first segment
(``time.monotonic_ns`` in one process). Several participants talk at once, each
waiting for its turn's final frame before the next turn.

- zero-delay model (``OfflineLLM(time_to_first_token_s=0, tokens_per_second=0)``):
  the runtime's own overhead, p50 and p99, and their ratios to the raw pyzmq round
  trip measured in the same repetition (before its first chunk a turn crosses the
  broker ten times, five raw round trips: the query; the remote destination's
  routing-aid, admit and answer asks and their replies; started; proceed; the chunk);
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
    real_p50, real_p99, real_firsts = [], [], []
    failed = 0
    with Deployment(Config()) as deployment:
        ctx.progress(
            f"turn: {len(deployment.workers)} processes up; {turns * PARTICIPANTS} zero-delay "
            "turns "
            f"and {asks} raw round trips per repetition"
        )
        for rep in range(ctx.repetitions + 1):  # repetition 0 warms up
            raw = deployment.raw_rtt(asks)
            result = deployment.turns(turns, participants, PAUSE_MS)
            if rep == 0:
                continue
            failed += result["failed"]
            raw_p50.append(percentile(raw, 0.5))
            raw_p99.append(percentile(raw, 0.99))
            p50.append(percentile(result["first_us"], 0.5))
            p99.append(percentile(result["first_us"], 0.99))
            bus_p50.append(percentile(result["bus_us"], 0.5))
            rtts += raw
            firsts += result["first_us"]
            ctx.progress(
                f"turn: rep {rep}/{ctx.repetitions} zero-delay p50 {p50[-1]:,.0f} us p99 "
                f"{p99[-1]:,.0f} us; "
                f"raw round trip p50 {raw_p50[-1]:.0f} us"
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
    group = "turn to first chunk at the renderer, zero-delay model"
    rows = [
        Row(
            group=group,
            subject="raw pyzmq round trip (same broker)",
            unit="us",
            median=median(raw_p50),
            repetitions=raw_p50,
            higher_is_better=False,
            extra={"p99 us": median(raw_p99)},
            samples=thin(rtts),
        ),
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
                "first fragment in client p50 us": median(bus_p50),
            },
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
        "median column: p50 per repetition, median over repetitions; x raw: paired per-repetition "
        "ratios",
    ]
    if failed:
        notes.append(
            f"{failed} turns failed (no completed reply within the timeout) and are not in the "
            "figures"
        )
    return SuiteResult(rows=rows, notes=notes)


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
