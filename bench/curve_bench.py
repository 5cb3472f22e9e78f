"""Curve suite: the bus's cost of CURVE and of the broker's per-identity check, same run.

The xrmq actors of the bus suite (``bench.bus_workers`` xrmq sender and receiver, one
process each) through one broker process per variant, all alive for the whole run and
measured in turn in every repetition:

- ``ipc``: the plain broker (libzmq's proxy) on ipc, the edge box's default;
- ``tcp``: the same on tcp loopback;
- ``tcp+curve, proxy``: CURVE on every socket, libzmq's proxy, no ACL (encryption alone);
- ``tcp+curve, loop``: the secure broker's Python loop, every check answering "allowed";
- ``tcp+curve+acl``: the secure broker as ``xrmq bus --config`` runs it with
  ``mode = "curve"`` (each message's metadata and each subscription checked).

Figures: one-way throughput (msg/s) and ask round trip p50 (us), each with its paired
per-repetition ratio to ``ipc`` and to ``tcp``, and the broker's CPU per message; and the
check alone, in-process (``AccessPolicy.check_message``, us per message). The
cost of encryption is ``proxy`` over ``tcp``; of the check, ``acl`` over ``proxy``
(split by ``loop`` into Python forwarding and the check itself). A quick run (CI) measures
only ``tcp+curve+acl`` (three processes: the suite keeps working, in seconds).
"""

from __future__ import annotations

import shutil
import tempfile
from collections import defaultdict
from contextlib import ExitStack
from pathlib import Path

from .procs import Worker
from .stats import median, percentile, thin
from .suite import Row, Suite, SuiteContext, SuiteResult

VARIANTS = {
    "ipc": "ipc",
    "tcp": "tcp",
    "proxy": "tcp+curve, proxy",
    "loop": "tcp+curve, loop",
    "acl": "tcp+curve+acl",
}
CONFIG = """
[bus]
address = "{bus}"

[bus.security]
mode = "curve"
keys = "{keys}"

[bus.identities.bench]
publish = ["bench.*"]
sources = ["*"]
subscribe = ["bench.*"]
"""


def _free_tcp_bus() -> str:
    import socket

    for _ in range(100):
        with socket.socket() as first:
            first.bind(("127.0.0.1", 0))
            port = first.getsockname()[1]
        try:
            for offset in (1, 2):
                with socket.socket() as other:
                    other.bind(("127.0.0.1", port + offset))
        except OSError:
            continue
        if port < 65530:
            return f"tcp://127.0.0.1:{port}"
    raise RuntimeError("no three consecutive free tcp ports")


def _broker(variant: str, directory: Path, keys: Path) -> tuple[str, Worker]:
    cli = ("-m", "xrmq.actors.cli", "bus", "--no-capture", "--bus")
    if variant == "ipc":
        bus = f"ipc://{directory}/bus"
        return bus, Worker("broker-ipc", *cli, bus)
    bus = _free_tcp_bus()
    if variant == "tcp":
        return bus, Worker("broker-tcp", *cli, bus)
    if variant == "acl":
        config = directory / "curve.toml"
        config.write_text(CONFIG.format(bus=bus, keys=keys))
        return bus, Worker("broker-acl", *cli, bus, "--config", str(config))
    return bus, Worker(
        f"broker-{variant}", "-m", "bench.curve_workers", f"curve-{variant}", bus, str(keys)
    )


def _check_cost(calls: int) -> float:
    """Microseconds per ``check_message`` of a typical allowed message (key split, metadata
    decoded, sender owner, topic and source patterns)."""
    import time

    import msgspec

    from xrmq.actors.runtime.security import AccessPolicy, Permissions
    from xrmq.schemas import MessageMetadata

    policy = AccessPolicy(
        {
            "bench": Permissions(publish=["bench.*"], sources=["*"]),
            "other": Permissions(),
            "bench-2": Permissions(),
        }
    )
    key = b"bench.fragment.x\x00p1\x00"
    metadata = msgspec.msgpack.encode(
        MessageMetadata(
            "bench-xrmq-sender:1:1", "application", "bench-xrmq-sender", 1, 1, 1, "c", None, "p1"
        )
    )
    check = policy.check_message
    start = time.perf_counter_ns()
    for _ in range(calls):
        check("bench", key, metadata, False)
    return (time.perf_counter_ns() - start) / calls / 1000


def run(ctx: SuiteContext) -> SuiteResult:
    from xrmq.actors.edge.identities import SUPERVISOR_IDENTITY
    from xrmq.actors.runtime.security import create_keypair

    count = 300 if ctx.quick else 50_000
    asks = 20 if ctx.quick else 1_000
    variants = [v for v in VARIANTS if not ctx.quick or v == "acl"]
    directory = Path(tempfile.mkdtemp(prefix="xrmq-bench-curve-"))
    directory.chmod(0o700)
    keys = directory / "keys"
    # The broker's config always knows xrmq up's own identity, so it needs its key too.
    for name in ("broker", "bench", SUPERVISOR_IDENTITY):
        create_keypair(name, keys)
    curve_env = {
        "XRMQ_KEY": str(keys / "bench.key_secret"),
        "XRMQ_SERVER_KEY": str(keys / "broker.key"),
    }
    throughput: dict[str, list[float]] = defaultdict(list)
    p50: dict[str, list[float]] = defaultdict(list)
    p99: dict[str, list[float]] = defaultdict(list)
    rtts: dict[str, list[float]] = defaultdict(list)
    broker_cpu: dict[str, list[float]] = defaultdict(list)
    lost: dict[str, int] = defaultdict(int)
    try:
        with ExitStack() as stack:
            workers = {}
            for variant in variants:
                bus, broker = _broker(variant, directory, keys)
                stack.callback(broker.close)
                broker.expect("xrmq bus: ready")
                env = (
                    curve_env
                    if variant not in ("ipc", "tcp")
                    else {"XRMQ_KEY": "", "XRMQ_SERVER_KEY": ""}
                )
                receiver = Worker(
                    f"{variant}-receiver",
                    "-m",
                    "bench.bus_workers",
                    "xrmq-receiver",
                    bus,
                    str(count),
                    env=env,
                )
                stack.callback(receiver.close)
                sender = Worker(
                    f"{variant}-sender",
                    "-m",
                    "bench.bus_workers",
                    "xrmq-sender",
                    bus,
                    str(count),
                    env=env,
                )
                stack.callback(sender.close)
                workers[variant] = (broker, sender, receiver)
            for _, sender, receiver in workers.values():
                receiver.expect("ready")
                sender.expect("ready")
            ctx.progress(f"curve: {len(workers)} brokers up; {count} messages and {asks} asks each")
            for rep in range(ctx.repetitions + 1):  # repetition 0 warms up and is discarded
                order = variants if rep % 2 else list(reversed(variants))
                for variant in order:
                    broker, sender, receiver = workers[variant]
                    before = broker.cpu_seconds()
                    sender.command("send")
                    sent = sender.result()
                    got = receiver.result()
                    cpu = (broker.cpu_seconds() - before) / count * 1e6
                    sender.command(f"ask {asks}")
                    asked = sender.result()["rtt_us"]
                    if rep == 0:
                        continue
                    throughput[variant].append(
                        got["received"] / ((got["last_ns"] - sent["start_ns"]) / 1e9)
                    )
                    lost[variant] += count - got["received"]
                    broker_cpu[variant].append(cpu)
                    p50[variant].append(percentile(asked, 0.5))
                    p99[variant].append(percentile(asked, 0.99))
                    rtts[variant].extend(asked)
                    ctx.progress(
                        f"curve: rep {rep} {variant:5}: {throughput[variant][-1]:,.0f} msg/s, "
                        f"ask p50 {p50[variant][-1]:.0f} us, broker {cpu:.1f} us/msg"
                    )
    finally:
        shutil.rmtree(directory, ignore_errors=True)

    def ratio(series: dict[str, list[float]], variant: str, base: str) -> float:
        return median([x / b for x, b in zip(series[variant], series[base], strict=True)])

    def ratios(series: dict[str, list[float]], variant: str) -> dict[str, float]:
        return {
            f"x {base}": ratio(series, variant, base) for base in ("ipc", "tcp") if base in series
        }

    rows = []
    for variant in variants:
        subject = VARIANTS[variant]
        rows.append(
            Row(
                group="one-way throughput, xrmq actors, cross-process",
                subject=subject,
                unit="msg/s",
                median=median(throughput[variant]),
                repetitions=throughput[variant],
                higher_is_better=True,
                extra={
                    **ratios(throughput, variant),
                    "broker cpu us/msg": median(broker_cpu[variant]),
                    "lost": lost[variant],
                },
            )
        )
        rows.append(
            Row(
                group="ask round trip p50, xrmq actors, cross-process",
                subject=subject,
                unit="us",
                median=median(p50[variant]),
                repetitions=p50[variant],
                higher_is_better=False,
                extra={**ratios(p50, variant), "p99 us": median(p99[variant])},
                samples=thin(rtts[variant]),
            )
        )
    checks = [_check_cost(20_000 if ctx.quick else 200_000) for _ in range(ctx.repetitions)]
    rows.append(
        Row(
            group="broker metadata check per message, in-process",
            subject="AccessPolicy.check_message",
            unit="us",
            median=median(checks),
            repetitions=checks,
            higher_is_better=False,
        )
    )
    notes = [f"{VARIANTS[v]}: {n} messages lost" for v, n in lost.items() if n]
    return SuiteResult(rows=rows, bars=[], notes=notes)


SUITE = Suite(
    "curve", "Curve: the bus over tcp with CURVE and the broker's ACL, vs plain tcp and ipc", run
)
