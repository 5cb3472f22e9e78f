"""``xrmq top``: rows from RuntimeMetrics (rates, restarts, problems), their rendering, and the
command."""

from __future__ import annotations

import asyncio
import signal

import pytest

from xrmq.actors.edge.top import RED, RESET, TopView, render
from xrmq.actors.runtime import Agent, AgentRuntime, RuntimeContext, subscribe
from xrmq.schemas import ProcessState, RuntimeMetrics, SupervisorReport
from xrmq.topics import METRICS_TOPIC, SUPERVISOR_TOPIC

from buses import broker_process, expect_line, reap, top_once_json
from edge_box import start_up, write_config
from raw_client import RawClient

pytestmark = pytest.mark.timeout(60)


def metrics(
    runtime="conversation", epoch=1, at_s=0.0, published=0, delivered=0, **fields
) -> RuntimeMetrics:
    counters = {"gaps": 0, "stale": 0, "rejected": 0, "overflow": 0, "handler_errors": 0} | fields
    return RuntimeMetrics(
        runtime=runtime,
        epoch=epoch,
        pid=42,
        timestamp_us=int(at_s * 1e6),
        published=published,
        delivered=delivered,
        **counters,
    )


def test_rates_come_from_two_reports_of_one_incarnation():
    view = TopView()
    view.observe(metrics(at_s=10.0, published=100, delivered=50), received_at=100.0)
    [row] = view.rows(now=100.5)
    assert (row.published_per_s, row.delivered_per_s, row.age_s) == (None, None, 0.5)
    view.observe(
        metrics(
            at_s=12.0,
            published=300,
            delivered=60,
            gaps=3,
            actors={"router": 4},
            gauges={"context.participants": 2.0},
        ),
        received_at=102.0,
    )
    [row] = view.rows(now=103.0)
    assert (row.published_per_s, row.delivered_per_s, row.age_s) == (100.0, 5.0, 1.0)
    assert (row.gaps, row.actors, row.gauges, row.restarts) == (
        3,
        {"router": 4},
        {"context.participants": 2.0},
        0,
    )
    # the process restarted
    view.observe(metrics(epoch=2, at_s=13.0, published=5), received_at=103.0)
    [row] = view.rows(now=103.0)
    assert (row.restarts, row.published_per_s, row.published) == (1, None, 5)
    assert view.reports("conversation") == 3 and view.reports("other") == 0


def test_render_shows_each_runtime_its_actors_gauges_and_problems():
    view = TopView()
    view.observe(metrics("router", at_s=1.0), received_at=0.0)
    view.observe(
        metrics(
            "context.0",
            at_s=1.0,
            rejected=2,
            actors={"dialogue[p1]": 7},
            gauges={"context.compaction_backlog": 3.0},
        ),
        received_at=0.0,
    )
    text = render(view.rows(now=9.0), stale_after_s=5.0, color=True)
    lines = text.splitlines()
    assert lines[0].startswith("\x1b[1mcontext.0\x1b[0m  pid 42")
    assert f"{RED}9.0s ago (stale){RESET}" in lines[0]
    assert f"{RED}rejected 2{RESET}" in text and "gaps 0" in text
    assert "context.compaction_backlog 3" in text
    assert any(line.endswith("dialogue[p1]") and " 7 " in line for line in lines)
    assert any(line.startswith("\x1b[1mrouter") for line in lines)
    plain = render(view.rows(now=1.0), color=False)
    assert "\x1b" not in plain and plain.startswith("context.0  pid 42  1.0s ago")
    assert render([], color=False) == "no runtime has reported on the bus yet\n"


def test_render_shows_faults_per_actor_restarts_rejections_by_category_and_evictions():
    view = TopView()
    view.observe(
        metrics(
            "renderer",
            at_s=1.0,
            rejected=3,
            faults=2,
            actor_restarts=1,
            actor_faults={"renderer": 2},
            actors={"renderer": 0, "other": 0},
            rejected_by={"participant": 2, "epoch": 1},
            evicted=5,
            evicted_by={"incoming_streams": 5},
        ),
        received_at=0.0,
    )
    row = view.rows(now=1.0)[0]
    assert (row.faults, row.actor_faults, row.actor_restarts) == (2, {"renderer": 2}, 1)
    assert row.rejected_by == {"participant": 2, "epoch": 1}
    assert row.evicted_by == {"incoming_streams": 5}
    text = render([row], color=False)
    assert "faults 2" in text and "actor restarts 1" in text
    assert "rejected: epoch 1  participant 2" in text and "evicted: incoming_streams 5" in text
    lines = text.splitlines()
    assert any(line.endswith("renderer  faults 2") for line in lines)
    assert any(line.endswith("  other") for line in lines)


class Sensor(Agent):
    def gauges(self) -> dict[str, float]:
        return {"context.participants": 2.0}


async def test_top_once_json_shows_a_runtime_publishing_metrics():
    with broker_process() as bus:
        runtime = AgentRuntime(bus, name="sensor-box", metrics_interval=0.05)
        runtime.register("sensor", Sensor())
        async with runtime:
            rows = await top_once_json(bus)
    [row] = [row for row in rows if row["runtime"] == "sensor-box"]
    assert row["actors"] == {"sensor": 0}
    assert row["gauges"] == {"context.participants": 2.0}
    assert row["published_per_s"] > 0  # two reports arrived: it publishes at least its heartbeat
    assert row["gaps"] == row["rejected"] == 0


def test_a_process_left_down_a_restarting_one_and_a_stuck_actor_are_shown():
    view = TopView()
    view.observe(
        metrics("router", at_s=1.0, actors={"router": 3, "proxy": 0}, stuck={"router": 12.0}),
        received_at=0.0,
    )
    view.observe(metrics("conversation", at_s=1.0), received_at=0.0)
    view.observe_supervisor(
        SupervisorReport(
            "xrmq up",
            7,
            0,
            (
                ProcessState("router", "running", pid=42),
                ProcessState("conversation", "restarting", restarts=2),
                ProcessState("renderer", "down", reason="gave up on renderer: 5 crashes (limit 5)"),
            ),
        )
    )
    rows = {row.runtime: row for row in view.rows(now=1.0)}
    # It never reported: a row of its own.
    assert (rows["renderer"].state, rows["renderer"].pid) == ("down", 0)
    assert rows["conversation"].state == "restarting" and rows["router"].stuck == {"router": 12.0}
    text = render(list(rows.values()), color=True)
    assert f"renderer{RESET}  {RED}DOWN: gave up on renderer: 5 crashes (limit 5){RESET}" in text
    assert f"{RED}restarting{RESET}" in text
    assert any(line.endswith(f"router  {RED}STUCK 12s{RESET}") for line in text.splitlines())
    assert not any("STUCK" in line and line.endswith("proxy") for line in text.splitlines())


def test_the_header_names_the_bus_and_totals_every_runtime():
    from xrmq.actors.edge.top import summary

    view = TopView()
    for runtime, rejected in (("router", 0), ("context.0", 2)):
        view.observe(metrics(runtime, at_s=1.0, published=10, delivered=20), received_at=0.0)
        view.observe(
            metrics(runtime, at_s=2.0, published=20, delivered=40, rejected=rejected),
            received_at=1.0,
        )
    view.observe(metrics("router", epoch=2, at_s=3.0), received_at=2.0)
    text = summary(view.rows(now=2.0), "ipc:///run/box/bus", color=False)
    first, second = text.splitlines()[:2]
    assert (
        first == "xrmq top  bus ipc:///run/box/bus  broker: up  2 runtimes  in 20.0/s  out 10.0/s"
    )
    assert second == "  gaps 0  rejected 2  overflow 0  handler errors 0  restarts 1"


class Heartbeats(Agent):
    """Sets ``rejected`` once the ``watched`` runtime reports a rejected frame."""

    def __init__(self, watched: str) -> None:
        self.watched = watched
        self.rejected = asyncio.Event()

    @subscribe(METRICS_TOPIC)
    async def on_metrics(self, message: RuntimeMetrics, ctx: RuntimeContext) -> None:
        if message.runtime == self.watched and message.rejected:
            self.rejected.set()


async def test_top_shows_the_supervisors_own_runtime_with_the_frames_it_rejected(tmp_path):
    config = write_config(tmp_path, '[processes.echo]\nroles = ["edge_roles:echo"]\n')
    bus = f"ipc://{tmp_path}/bus"
    up = start_up(config)
    try:
        expect_line(up, "xrmq up: ready")
        supervisor = f"xrmq-up.{up.pid}"
        watcher = Heartbeats(supervisor)
        runtime = AgentRuntime(bus)
        runtime.register("heartbeats", watcher)
        async with runtime:
            client = RawClient(bus)
            try:
                client.wait_ready()
                client.send(SUPERVISOR_TOPIC.name, None, 1, {"not": "a report"})
            finally:
                client.context.destroy(linger=0)
            await asyncio.wait_for(watcher.rejected.wait(), 20)
            rows = await top_once_json(bus, expect=3)  # the broker, echo and the supervisor
        up.send_signal(signal.SIGTERM)
        assert up.wait(timeout=30) == 0
    finally:
        reap(up)
    [row] = [row for row in rows if row["runtime"] == supervisor]
    assert row["pid"] == up.pid and row["actors"] == {"supervisor": 0}
    assert row["rejected"] == 1 and row["rejected_by"] == {"payload": 1}


def test_top_prints_a_whole_gauge_in_full_and_a_fraction_to_four_digits():
    from xrmq.actors.edge.top import _number

    assert [_number(v) for v in (4194304.0, 0, 65536, 0.123456, 2.5)] == [
        "4194304",
        "0",
        "65536",
        "0.1235",
        "2.5",
    ]
