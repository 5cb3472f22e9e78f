"""Load suite: several publisher processes through the broker to one subscriber (issue 13).

An ``xrmq bus`` broker, PUBLISHERS publisher processes (each an ``AgentRuntime``
heartbeating every HEARTBEAT_S, publishing on KEYS participants of one topic) and one
subscriber process that accounts for every message: received, or reported lost (a gap,
or a lost tail the sender's heartbeat revealed). Two phases per repetition:

- sustained: a rate the subscriber keeps up with, for a minute in all (spread over the
  repetitions); bar: no loss goes unreported (and normally there is no loss at all);
- overload: the publishers send as fast as they can for a few seconds (the subscriber's
  receive HWM is small, so the broker drops what it cannot hold for it); bar:
  every loss is reported, at the latest by a heartbeat after the subscriber caught up;
- closing overload: as many publisher processes without heartbeats (a one-shot client's
  defaults) send as fast as they can for the same time and stop: their final heartbeat
  alone announces their tails, and the broker repeats it (it runs with the
  ``metrics_interval`` of an ``xrmq up`` box, BROKER_METRICS_S); bar: every loss is reported.

Unreported losses are what the publishers sent minus what the subscriber received or
was told it lost, counted once it has been quiet for two heartbeat intervals.
"""

from __future__ import annotations

from .procs import Worker, broker
from .stats import median
from .suite import Bar, Row, Suite, SuiteContext, SuiteResult, bar

PUBLISHERS = 4
KEYS = 4
HEARTBEAT_S = 0.5
TOPIC = "bench.load"
SUSTAINED_RATE = 1_500
"""Messages per second per publisher in the sustained phase (6,000/s in all)."""
BROKER_METRICS_S = 1.0
"""The broker's heartbeat, as ``xrmq up`` runs it: it repeats stopped publishers' tails."""
SUBSCRIBER_HWM = 2_000
"""The subscriber's receive HWM: small, so an overload overflows into losses (at the broker,
whose per-subscriber HWM then fills) instead of into the subscriber's memory."""


def phase(
    publishers: list[Worker], subscriber: Worker, rate: float, seconds: float
) -> dict[str, float]:
    for worker in publishers:
        worker.command(f"go {rate} {seconds}")
    sent = sum(worker.result(timeout=seconds + 120)["sent"] for worker in publishers)
    subscriber.command(f"report {sent} {2 * HEARTBEAT_S}")
    report = subscriber.result(timeout=300)
    unreported = sent - report["received"] - report["lost"]
    return {
        "sent": sent,
        "received": report["received"],
        "lost": report["lost"],
        "unreported": unreported,
        "seconds": seconds,
    }


def closing_phase(
    bus: str, subscriber: Worker, count: int, seconds: float, rep: int
) -> dict[str, float]:
    """``count`` publisher processes without heartbeats send as fast as they can for
    ``seconds`` and stop; then the subscriber accounts for what they sent."""
    closing = [
        Worker(
            f"load-closing-{rep}-{index}",
            "-m",
            "bench.load_workers",
            "closing",
            bus,
            TOPIC,
            f"load-close-{rep}-{index}",
            str(KEYS),
        )
        for index in range(count)
    ]
    try:
        for worker in closing:
            worker.expect("ready", timeout=60)
        for worker in closing:
            worker.command(f"go {seconds}")
        sent = sum(worker.result(timeout=seconds + 120)["sent"] for worker in closing)
    finally:
        for worker in closing:
            worker.close()
    subscriber.command(f"report {sent} {2 * BROKER_METRICS_S}")
    report = subscriber.result(timeout=300)
    return {
        "sent": sent,
        "received": report["received"],
        "lost": report["lost"],
        "unreported": sent - report["received"] - report["lost"],
        "seconds": seconds,
    }


def progress(ctx: SuiteContext, name: str, rep: int, figures: dict[str, float]) -> None:
    ctx.progress(
        f"load: {name} rep {rep + 1}/{ctx.repetitions}: "
        f"sent {figures['sent']:.0f}, "
        f"received {figures['received']:.0f}, lost {figures['lost']:.0f}, "
        f"unreported {figures['unreported']:.0f}"
    )


def run(ctx: SuiteContext) -> SuiteResult:
    sustained_s = 0.5 if ctx.quick else 60.0 / ctx.repetitions
    overload_s = 0.3 if ctx.quick else 3.0
    publishers_n = 2 if ctx.quick else PUBLISHERS
    results: dict[str, list[dict[str, float]]] = {
        "sustained": [],
        "overload": [],
        "closing overload": [],
    }
    with broker("--metrics-interval", str(BROKER_METRICS_S)) as (bus, _):
        subscriber = Worker(
            "load-subscriber",
            "-m",
            "bench.load_workers",
            "subscriber",
            bus,
            TOPIC,
            str(SUBSCRIBER_HWM),
        )
        publishers = [
            Worker(
                f"load-publisher-{index}",
                "-m",
                "bench.load_workers",
                "publisher",
                bus,
                TOPIC,
                f"load-pub-{index}",
                str(KEYS),
                str(HEARTBEAT_S),
            )
            for index in range(publishers_n)
        ]
        try:
            for worker in (subscriber, *publishers):
                worker.expect("ready", timeout=60)
            for rep in range(ctx.repetitions):
                for name, rate, seconds in (
                    ("sustained", SUSTAINED_RATE, sustained_s),
                    ("overload", 0, overload_s),
                ):
                    figures = phase(publishers, subscriber, rate, seconds)
                    results[name].append(figures)
                    progress(ctx, name, rep, figures)
                figures = closing_phase(bus, subscriber, publishers_n, overload_s, rep)
                results["closing overload"].append(figures)
                progress(ctx, "closing overload", rep, figures)
        finally:
            for worker in (subscriber, *publishers):
                worker.close()
    rows: list[Row] = []
    bars: list[Bar] = []
    for name, runs in results.items():
        sent = [f["sent"] for f in runs]
        rates = [f["received"] / f["seconds"] for f in runs]
        unreported = [f["unreported"] for f in runs]
        extra = {
            "sent": median(sent),
            "received": median([f["received"] for f in runs]),
            "reported lost": median([f["lost"] for f in runs]),
            "unreported": median(unreported),
        }
        rows.append(
            Row(
                group=f"load: {publishers_n} publisher processes -> broker -> 1 subscriber",
                subject=name,
                unit="msg/s received",
                median=max(median(rates), 1e-9),
                repetitions=rates,
                higher_is_better=True,
                extra=extra,
            )
        )
        bars.append(
            bar(
                f"unreported losses, {name}",
                max(unreported),
                "<=",
                0,
                "sent - received - reported lost, the worst repetition",
            )
        )
    notes = [
        f"sustained: {SUSTAINED_RATE}/s per publisher for {sustained_s:g} s per repetition; "
        "overload: as fast "
        f"as the publishers can for {overload_s:g} s; subscriber receive HWM {SUBSCRIBER_HWM}; "
        "heartbeats every "
        f"{HEARTBEAT_S:g} s; {KEYS} keys per publisher; closing overload: as many publisher "
        "processes without heartbeats, sending as fast as they can for the overload's time, "
        "then stopping (their final heartbeat alone announces their tails; the broker, with "
        f"the {BROKER_METRICS_S:g} s heartbeat of an xrmq up box, repeats it)"
    ]
    return SuiteResult(rows=rows, bars=bars, notes=notes)


SUITE = Suite(
    "load",
    "Load: publisher processes through the broker to one subscriber; every loss reported",
    run,
)
