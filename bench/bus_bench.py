"""Bus suite: xrmq actors vs raw pyzmq through one broker process, and in-process peers.

Cross-process (a real ``xrmq bus`` broker process, ipc transport): a sender process
and a receiver process per implementation, all alive for the whole run and
measured in turn, so both implementations see the same machine state:

- one-way throughput: COUNT stream fragments, from the sender's first send to the
  receiver's (actor's) handling of the last, in messages/s; loss is counted, never
  hidden (large HWMs everywhere; a partial batch is reported as loss);
  with the CPU time each process (sender, broker, receiver) spent per message, which
  is what the two shared cores run out of, and far less noisy than wall-clock rates;
- ask round trip: sequential request/reply through the broker, p50 and p99 in us;
  the implementations take their asks in turn, in chunks of a tenth, so drift within a
  repetition hits them alike.

Three implementations: raw pyzmq (the transport limit: frames encoded once, nothing
decoded, the runtime's own socket calls), a raw pyzmq client of the protocol (fresh
metadata and payload encoded per message, both decoded on arrival, no runtime: what
any client of the wire protocol pays) and xrmq actors. The throughput bar compares
xrmq with the protocol client; the round-trip bar with raw.

Each repetition measures the three implementations in turn under each CPU placement:
"shared" (the scheduler places the seven processes on the two cores) and, in a full
run, "pinned" (broker and senders on CPU 0, receivers on CPU 1). The bars use the
paired per-repetition ratios (xrmq to the client, xrmq to raw), median over
repetitions, shared placement.

Local fan-out (shared placement): the xrmq sender sends the same fragments to a third
receiving process, where two actors subscribe to one topic, once on ``ResponseOutput``
(deeply immutable: both actors share one decoded message) and once on a type with the
same fields and validation that is not frozen (each actor gets its own decode, so
neither can change the other's message). The receiver's CPU per message, paired per
repetition, is the price of private copies.

In-process peers (autogen-core's ``SingleThreadedAgentRuntime``, Pykka
``ThreadingActor``s) and xrmq with its embedded broker run afterwards, each in a
fresh process (``bench.peer_workers``). "Ahead of both peers" is judged with xrmq's
cross-process figures, the strict reading (the peers never leave their process); the
embedded xrmq rows show the same-footing comparison.
"""

from __future__ import annotations

from collections import defaultdict
from contextlib import ExitStack

from .procs import ALL_CPUS, Worker, broker
from .stats import median, percentile, thin
from .suite import Row, Suite, SuiteContext, SuiteResult, bar

IMPLEMENTATIONS = {
    "raw": "raw pyzmq",
    "codec": "raw pyzmq + msgspec, per message",
    "xrmq": "xrmq actors",
}
PEERS = {
    "autogen-core": "autogen-core",
    "pykka": "Pykka",
    "xrmq-embedded": "xrmq actors, embedded broker",
}
THROUGHPUT_BAR, RTT_BAR = 0.7, 1.3
CPU_PARTS = ("sender", "broker", "receiver")


def placements(quick: bool) -> dict[str, dict[str, frozenset[int]]]:
    """CPU sets per process kind for each placement measured."""
    shared = {"broker": ALL_CPUS, "sender": ALL_CPUS, "receiver": ALL_CPUS}
    if quick or len(ALL_CPUS) < 2:
        return {"shared": shared}
    first, second = sorted(ALL_CPUS)[:2]
    return {
        "shared": shared,
        "pinned": {
            "broker": frozenset({first}),
            "sender": frozenset({first}),
            "receiver": frozenset({second}),
        },
    }


def run(ctx: SuiteContext) -> SuiteResult:
    count = 2_000 if ctx.quick else 100_000
    asks = 100 if ctx.quick else 2_000
    layouts = placements(ctx.quick)
    throughput: dict[tuple[str, str], list[float]] = defaultdict(list)
    loss: dict[tuple[str, str], int] = defaultdict(int)
    p50: dict[tuple[str, str], list[float]] = defaultdict(list)
    p99: dict[tuple[str, str], list[float]] = defaultdict(list)
    rtts: dict[tuple[str, str], list[float]] = defaultdict(list)
    cpu_us: dict[tuple[tuple[str, str], str], list[float]] = defaultdict(list)
    fanout: dict[str, dict[str, list[float]]] = {kind: defaultdict(list) for kind in FANOUT_KINDS}
    notes: list[str] = []
    with broker() as (bus, broker_worker), ExitStack() as stack:
        workers = {}
        for impl in IMPLEMENTATIONS:
            receiver = Worker(
                f"{impl}-receiver", "-m", "bench.bus_workers", f"{impl}-receiver", bus, str(count)
            )
            stack.callback(receiver.close)
            sender = Worker(
                f"{impl}-sender", "-m", "bench.bus_workers", f"{impl}-sender", bus, str(count)
            )
            stack.callback(sender.close)
            workers[impl] = (sender, receiver)
        fanout_receiver = Worker(
            "xrmq-fanout-receiver",
            "-m",
            "bench.bus_workers",
            "xrmq-fanout-receiver",
            bus,
            str(count),
        )
        stack.callback(fanout_receiver.close)
        for sender, receiver in workers.values():
            receiver.expect("ready")
            sender.expect("ready")
        fanout_receiver.expect("ready")
        ctx.progress(
            f"bus: broker and {len(workers) * 2} workers up; {count} messages and {asks} asks per "
            "measurement"
        )
        for rep in range(ctx.repetitions + 1):  # repetition 0 warms up and is discarded
            for layout_name, layout in layouts.items():
                broker_worker.pin(layout["broker"])
                for sender, receiver in workers.values():
                    sender.pin(layout["sender"])
                    receiver.pin(layout["receiver"])
                order = list(IMPLEMENTATIONS) if rep % 2 else list(reversed(IMPLEMENTATIONS))
                for impl in order:
                    sender, receiver = workers[impl]
                    cpu_before = [w.cpu_seconds() for w in (sender, broker_worker, receiver)]
                    sender.command("send")
                    sent = sender.result()
                    got = receiver.result()
                    cpu = [
                        (w.cpu_seconds() - b) / count * 1e6
                        for w, b in zip((sender, broker_worker, receiver), cpu_before)
                    ]
                    rate = got["received"] / ((got["last_ns"] - sent["start_ns"]) / 1e9)
                    if rep == 0:
                        continue
                    key = (impl, layout_name)
                    throughput[key].append(rate)
                    for part, value in zip(CPU_PARTS, cpu):
                        cpu_us[key, part].append(value)
                    loss[key] += count - got["received"]
                if layout_name == "shared":
                    _fan_out(workers["xrmq"][0], fanout_receiver, count, rep, fanout)
                asked = _interleaved_asks(workers, order, asks)
                if rep == 0:
                    continue
                for impl in order:
                    key = (impl, layout_name)
                    p50[key].append(percentile(asked[impl], 0.5))
                    p99[key].append(percentile(asked[impl], 0.99))
                    rtts[key].extend(asked[impl])
                    ctx.progress(
                        f"bus: rep {rep}/{ctx.repetitions} {layout_name:6} {impl:5}: "
                        f"{throughput[key][-1]:,.0f} msg/s, lost {loss[key]} so far, ask p50 "
                        f"{p50[key][-1]:.0f} us"
                    )
    rows: list[Row] = []
    for layout_name in layouts:
        raw_tp, raw_p50 = throughput[("raw", layout_name)], p50[("raw", layout_name)]
        client_tp = throughput[("codec", layout_name)]
        for impl, subject in IMPLEMENTATIONS.items():
            key = (impl, layout_name)
            tp_ratio = [x / r for x, r in zip(throughput[key], raw_tp)]
            rtt_ratio = [x / r for x, r in zip(p50[key], raw_p50)]
            rows.append(
                Row(
                    group=f"one-way throughput, cross-process ({layout_name} cores)",
                    subject=subject,
                    unit="msg/s",
                    median=median(throughput[key]),
                    repetitions=throughput[key],
                    higher_is_better=True,
                    extra={
                        "x raw": median(tp_ratio),
                        "x client": median([x / c for x, c in zip(throughput[key], client_tp)]),
                        "lost": loss[key],
                        **{f"{part} cpu us/msg": median(cpu_us[key, part]) for part in CPU_PARTS},
                    },
                )
            )
            rows.append(
                Row(
                    group=f"ask round trip p50, cross-process ({layout_name} cores)",
                    subject=subject,
                    unit="us",
                    median=median(p50[key]),
                    repetitions=p50[key],
                    higher_is_better=False,
                    extra={"x raw": median(rtt_ratio), "p99 us": median(p99[key])},
                    samples=thin(rtts[key]),
                )
            )
    for name, count_lost in loss.items():
        if count_lost:
            notes.append(f"{IMPLEMENTATIONS[name[0]]} ({name[1]}): {count_lost} messages lost")
    rows += _fanout_rows(fanout)
    for kind, figures in fanout.items():
        if sum(figures["lost"]):
            notes.append(f"local fan-out ({kind}): {sum(figures['lost']):.0f} deliveries lost")
    peer_rows = _peers(ctx, count, asks, notes)
    rows += peer_rows
    return SuiteResult(rows=rows, bars=_bars(rows), notes=notes)


ASK_CHUNKS = 10
FANOUT_KINDS = {
    "shared": "ResponseOutput (deeply immutable): one decode, shared",
    "private": "ResponseOutput's fields, not frozen: a decode per actor",
}
FANOUT_GROUP = "local fan-out to two actors of one process, cross-process (shared cores)"


def _fan_out(
    sender: Worker,
    receiver: Worker,
    count: int,
    rep: int,
    fanout: dict[str, dict[str, list[float]]],
) -> None:
    """COUNT fragments to two actors of one receiving process, once per kind (in alternating
    order): the receiver's CPU per message is the price of private copies for a mutable
    type, against sharing for an immutable one."""
    for kind in FANOUT_KINDS if rep % 2 else reversed(FANOUT_KINDS):
        before = receiver.cpu_ns()
        sender.command(f"fanout {kind}")
        sent = sender.result()
        got = receiver.result()
        if rep == 0:
            continue
        figures = fanout[kind]
        figures["receiver cpu"].append((receiver.cpu_ns() - before) / count / 1e3)
        figures["rate"].append(got["received"] / 2 / ((got["last_ns"] - sent["start_ns"]) / 1e9))
        figures["lost"].append(count * 2 - got["received"])


def _fanout_rows(fanout: dict[str, dict[str, list[float]]]) -> list[Row]:
    shared_cpu = fanout["shared"]["receiver cpu"]
    rows = []
    for kind, subject in FANOUT_KINDS.items():
        figures = fanout[kind]
        paired = [x / s for x, s in zip(figures["receiver cpu"], shared_cpu)]
        rows.append(
            Row(
                group=FANOUT_GROUP,
                subject=subject,
                unit="receiver cpu us/msg",
                median=median(figures["receiver cpu"]),
                repetitions=figures["receiver cpu"],
                higher_is_better=False,
                extra={
                    "x shared": median(paired),
                    "msg/s": median(figures["rate"]),
                    "lost": sum(figures["lost"]),
                },
            )
        )
    return rows


def _interleaved_asks(
    workers: dict[str, tuple[Worker, Worker]], order: list[str], asks: int
) -> dict[str, list[float]]:
    """``asks`` round trips per implementation, in chunks taken in turn, so the machine's
    drift during a repetition (other tenants, frequency, cache state) hits every
    implementation alike and the paired ratios compare like with like."""
    chunk = max(1, asks // ASK_CHUNKS)
    asked: dict[str, list[float]] = {impl: [] for impl in order}
    while len(asked[order[0]]) < asks:
        for impl in order:
            workers[impl][0].command(f"ask {min(chunk, asks - len(asked[impl]))}")
            asked[impl].extend(workers[impl][0].result()["rtt_us"])
    return asked


def _peers(ctx: SuiteContext, count: int, asks: int, notes: list[str]) -> list[Row]:
    rows = []
    peer_count = min(count, 20_000)
    for name, subject in PEERS.items():
        ctx.progress(
            f"bus: {subject}, in-process ({peer_count} messages, {asks} asks x {ctx.repetitions})"
        )
        worker = Worker(
            name, "-m", "bench.peer_workers", name, str(peer_count), str(asks), str(ctx.repetitions)
        )
        try:
            result = worker.result(timeout=600)
        finally:
            worker.close()
        if "skipped" in result:
            notes.append(f"{subject}: skipped: {result['skipped']}")
            ctx.progress(f"bus: {subject} skipped: {result['skipped']}")
            continue
        subject = f"{subject} {result['version']}"
        flat = [value for rep in result["rtt_us"] for value in rep]
        rows.append(
            Row(
                group="one-way throughput, in-process",
                subject=subject,
                unit="msg/s",
                median=median(result["throughput"]),
                repetitions=result["throughput"],
                higher_is_better=True,
            )
        )
        rep_p50 = [percentile(rep, 0.5) for rep in result["rtt_us"]]
        rows.append(
            Row(
                group="ask round trip p50, in-process",
                subject=subject,
                unit="us",
                median=median(rep_p50),
                repetitions=rep_p50,
                higher_is_better=False,
                extra={"p99 us": median([percentile(rep, 0.99) for rep in result["rtt_us"]])},
                samples=thin(flat),
            )
        )
    return rows


def _bars(rows: list[Row]) -> list:
    def find(group: str, subject_prefix: str) -> Row | None:
        return next(
            (row for row in rows if row.group == group and row.subject.startswith(subject_prefix)),
            None,
        )

    tp_group, rtt_group = (
        "one-way throughput, cross-process (shared cores)",
        "ask round trip p50, cross-process (shared cores)",
    )
    xrmq_tp, xrmq_rtt = find(tp_group, "xrmq actors"), find(rtt_group, "xrmq actors")
    assert xrmq_tp is not None and xrmq_rtt is not None  # every run measures xrmq
    bars = [
        # The throughput bar compares with a raw pyzmq client of the same protocol: it
        # encodes and decodes the same messages, so the ratio is the runtime's own cost.
        # Against frames encoded once and never decoded, the protocol's encoding alone
        # already sits at ~0.7x (the client's own "x raw"), so a bar there could only be
        # met by a runtime that costs nothing; that ratio stays in the table as "x raw".
        bar(
            "throughput vs a raw pyzmq client of the protocol (x client)",
            xrmq_tp.extra["x client"],
            ">=",
            THROUGHPUT_BAR,
            "same broker, messages encoded and decoded per message",
        ),
        bar("ask round trip p50 vs raw pyzmq (x raw)", xrmq_rtt.extra["x raw"], "<=", RTT_BAR),
    ]
    for prefix in ("autogen-core", "Pykka"):
        peer_tp = find("one-way throughput, in-process", prefix)
        peer_rtt = find("ask round trip p50, in-process", prefix)
        if peer_tp is None:
            continue
        assert peer_rtt is not None  # a peer that ran measured both
        bars.append(
            bar(
                f"throughput ahead of {prefix} (x peer)",
                xrmq_tp.median / peer_tp.median,
                ">=",
                1.0,
                "xrmq cross-process vs the peer in-process",
            )
        )
        bars.append(
            bar(
                f"ask round trip p50 ahead of {prefix} (x peer)",
                xrmq_rtt.median / peer_rtt.median,
                "<=",
                1.0,
                "xrmq cross-process vs the peer in-process",
            )
        )
    return bars


SUITE = Suite("bus", "Bus: xrmq actors vs raw pyzmq through one broker; in-process peers", run)
