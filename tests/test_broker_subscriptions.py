"""Subscriber counts: the broker counts live subscriptions per topic (``SubscriptionCounts``),
publishes them in its heartbeat, and ``xrmq topics`` shows them, as real subscribers come and
go (a runtime that stops, a process killed with SIGKILL)."""

from __future__ import annotations

import asyncio
import signal
import subprocess
import sys

import pytest

from xrmq.actors.runtime import Agent, AgentRuntime, Handlers, RuntimeContext
from xrmq.actors.runtime.subscriptions import OTHER, SubscriptionCounts, topic_of
from xrmq.schemas import ConversationContextUpdate, RuntimeMetrics
from xrmq.topics import METRICS_TOPIC, context_topic

from buses import broker_process, expect_line, reap

pytestmark = pytest.mark.timeout(90)
CLI = [sys.executable, "-m", "xrmq.actors.cli"]
GAUGES = context_topic("gauges")


@pytest.mark.parametrize(
    ("prefix", "topic"),
    [
        (b"voice.output\x00", "voice.output"),
        (b"voice.output\x00p1\x00", "voice.output"),
        (b"_inbox.router-1f\x00", "_inbox.*"),
        (b"_probe.say-2a\x00\x00?x", "_probe.*"),
        (b"", "*"),
        (b"voice.", "voice.*"),
    ],
)
def test_a_subscription_counts_for_the_topic_its_prefix_names(prefix, topic):
    assert topic_of(prefix) == topic


def test_counts_follow_subscribes_and_unsubscribes_stay_bounded_and_never_go_negative():
    counts = SubscriptionCounts(limit=2)
    for frame in (b"\x01a\x00", b"\x01a\x00p1\x00", b"\x01b\x00", b"\x01c\x00", b"\x01d\x00"):
        counts.frame(frame)
    assert counts.snapshot() == {"a": 2, "b": 1, OTHER: 2}  # past 2 topics: counted together
    for frame in (b"\x00a\x00", b"\x00c\x00", b"\x00b\x00", b"\x02junk", b""):
        counts.frame(frame)
    assert counts.snapshot() == {"a": 1, OTHER: 1}
    fresh = SubscriptionCounts()
    fresh.frame(b"\x00a\x00")  # a denied subscription's, or one from before the broker counted
    assert fresh.snapshot() == {}


class Gauges(Agent):
    def handlers(self) -> Handlers:
        return {GAUGES: self.on_gauge}

    async def on_gauge(self, message: ConversationContextUpdate, ctx: RuntimeContext) -> None:
        pass


class BrokerReports(Agent):
    """The broker's heartbeats; ``wait_for(n)`` until one counts ``n`` subscriptions of gauges."""

    def __init__(self) -> None:
        self.latest: dict[str, int] | None = None
        self._changed = asyncio.Condition()

    def handlers(self) -> Handlers:
        return {METRICS_TOPIC: self.on_metrics}

    async def on_metrics(self, message: RuntimeMetrics, ctx: RuntimeContext) -> None:
        if message.runtime == "broker":
            async with self._changed:
                self.latest = message.subscriptions
                self._changed.notify_all()

    async def wait_for(self, subscribers: int, timeout: float = 20) -> None:
        async with self._changed:
            await asyncio.wait_for(
                self._changed.wait_for(
                    lambda: self.latest is not None and self.latest.get("gauges", 0) == subscribers
                ),
                timeout,
            )


async def test_the_broker_counts_subscribers_as_they_come_and_go_and_topics_shows_them():
    with broker_process("--metrics-interval", "0.05") as bus:
        reports = BrokerReports()
        watcher = AgentRuntime(bus, name="watcher")
        watcher.register("reports", reports)
        async with watcher:
            await reports.wait_for(0)
            first = AgentRuntime(bus, name="first")
            first.register("gauges", Gauges())
            async with first:
                await reports.wait_for(1)
                second = AgentRuntime(bus, name="second")
                second.register("gauges", Gauges())
                async with second:
                    await reports.wait_for(2)
                await reports.wait_for(1)  # a runtime that stopped
                echo = subprocess.Popen(
                    [*CLI, "echo", "--bus", bus, "gauges"],
                    stdout=subprocess.PIPE,
                    stderr=subprocess.PIPE,
                    text=True,
                )
                try:
                    expect_line(echo, "xrmq echo: ready")
                    await reports.wait_for(2)
                    echo.send_signal(signal.SIGKILL)
                    echo.wait(timeout=20)
                finally:
                    reap(echo)
                await reports.wait_for(1)  # a process killed: libzmq unsubscribes it
                listing = await asyncio.to_thread(
                    subprocess.run,
                    [*CLI, "topics", "--all", "--bus", bus, "--window", "0.5"],
                    capture_output=True,
                    text=True,
                    timeout=30,
                )
            await reports.wait_for(0)
    assert listing.returncode == 0, listing.stderr
    lines = listing.stdout.splitlines()
    assert lines[1].split() == [
        "TOPIC",
        "MSGS",
        "MSG/S",
        "PUBLISHERS",
        "PARTICIPANTS",
        "SUBSCRIBERS",
    ]
    rows = {line.split()[0]: line.split()[1:] for line in lines[2:-1]}
    assert rows["gauges"] == ["0", "0.0", "0", "0", "1"]  # silent, but subscribed to
    assert int(rows["xrmq.metrics"][-1]) >= 1  # the watcher
    assert lines[-1].endswith("(subscribers: live subscriptions at the broker)")


def test_the_secure_broker_counts_the_subscriptions_it_applies_as_subscribers_come_and_go(
    tmp_path,
):
    import time

    import msgspec

    from xrmq.actors.runtime.security import Permissions

    from secure_bus import make_keys, secure_broker

    keys = make_keys(tmp_path / "keys", "broker", "ops", "nosy")
    reader = Permissions(subscribe=["notes", "xrmq.metrics"])
    decode = msgspec.msgpack.Decoder(RuntimeMetrics).decode
    with secure_broker(keys, {"ops": reader, "nosy": Permissions()}) as bus:
        watcher = bus.client("ops")
        clients = [watcher]
        try:
            watcher.subscribe(b"xrmq.metrics\x00")
            watcher.wait_ready()

            def wait_for(subscribers: int) -> None:
                deadline = time.monotonic() + 20
                while time.monotonic() < deadline:  # the broker reports every second
                    frames = watcher.wait_for("xrmq.metrics", timeout=20)[-1]
                    report = decode(frames[2])
                    if report.runtime == "broker":
                        if report.subscriptions.get("notes", 0) == subscribers:
                            return
                raise AssertionError(f"never {subscribers} subscriptions of notes")

            wait_for(0)
            first, second, denied = bus.client("ops"), bus.client("ops"), bus.client("nosy")
            clients += [first, second, denied]
            for client in (first, second, denied):
                client.subscribe(b"notes\x00")
                client.wait_ready()  # its subscriptions reached the broker before the probe's
            wait_for(2)  # the denied one is not counted
            second.close()
            clients.remove(second)
            wait_for(1)
        finally:
            for client in clients:
                client.close()
