"""``xrmq up`` across real OS processes: startup, restart after kill -9, clean shutdown, crash
loops."""

from __future__ import annotations

import asyncio
import os
import re
import signal
from pathlib import Path

import pytest

from xrmq.actors.runtime import Agent, AgentRuntime, RuntimeContext, shard_of
from xrmq.schemas import ConversationContextUpdate, SupervisorReport
from xrmq.topics import SUPERVISOR_TOPIC, context_topic

from buses import expect_line, processes_mentioning, reap
from edge_box import start_up, write_config

ECHO_TOPIC = context_topic("edge.echo")  # tests/procs/edge_roles.py answers on it

pytestmark = pytest.mark.timeout(60)


async def echo(bus: str, key: str, text: str) -> str:
    async with AgentRuntime(bus) as runtime:
        return await runtime.ask(
            ECHO_TOPIC,
            ConversationContextUpdate(text),
            participant_id=key,
            reply_type=str,
            timeout=10,
        )


def key_of_shard(shard: int) -> str:
    return next(f"p{i}" for i in range(100) if shard_of(f"p{i}", 2) == shard)


async def test_up_starts_restarts_a_killed_process_and_shuts_down_in_order(tmp_path):
    config = write_config(
        tmp_path,
        """
[processes.echo]
roles = ["edge_roles:echo"]
replicas = 2
[processes.last]
roles = ["edge_roles:idle"]
after = ["echo"]
""",
    )
    bus = f"ipc://{tmp_path}/bus"
    up = start_up(config)
    try:
        ready = expect_line(up, "xrmq up: ready")
        pids = {name: int(pid) for name, pid in re.findall(r"(\S+)=(\d+)", ready) if name != "bus"}
        assert set(pids) == {"echo.0", "echo.1", "last"}
        assert await echo(bus, key_of_shard(0), "one") == "echo.0:one"
        assert await echo(bus, key_of_shard(1), "two") == "echo.1:two"

        os.kill(pids["echo.1"], signal.SIGKILL)
        assert expect_line(up, "xrmq up: echo.1 exited").startswith(
            "xrmq up: echo.1 exited (killed by SIGKILL); 1 crash within 60s, restarting in 0.05s"
        )
        restarted = expect_line(up, "xrmq up: restarted echo.1")
        new_pid = int(restarted.rpartition("pid=")[2])
        assert new_pid != pids["echo.1"]
        assert await echo(bus, key_of_shard(1), "again") == "echo.1:again"

        up.send_signal(signal.SIGTERM)
        rest = up.stdout.read().splitlines()
        assert up.wait(timeout=30) == 0
    finally:
        reap(up)
    assert rest[-1] == "xrmq up: stopped"
    stopped = [
        line.partition(" |")[0]
        for line in rest
        if line.endswith("xrmq run: stopped " + line.partition(" |")[0])
    ]
    assert stopped[0] == "last" and sorted(stopped[1:]) == [
        "echo.0",
        "echo.1",
    ]  # reverse dependency order
    broker_stopped = next(
        i for i, line in enumerate(rest) if line.startswith("bus |") and "broker.stopped" in line
    )
    # broker last
    assert broker_stopped > max(i for i, line in enumerate(rest) if "xrmq run: stopped" in line)
    assert processes_mentioning(str(tmp_path)) == []  # no orphans
    for pid in (*pids.values(), new_pid):
        assert not Path(f"/proc/{pid}").exists()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["edge.toml"]  # no socket or lock files


def test_a_crash_loop_of_a_stop_box_process_gives_up_with_the_reason_and_stops_everything(tmp_path):
    config = write_config(
        tmp_path,
        """
[processes.steady]
roles = ["edge_roles:idle"]
[processes.broken]
roles = ["edge_roles:fail"]
after = ["steady"]
on_give_up = "stop_box"
""",
        restart="max_crashes = 3",
    )
    up = start_up(config)
    try:
        output = up.stdout.read().splitlines()
        assert up.wait(timeout=30) == 1
    finally:
        reap(up)
    assert [line for line in output if line.startswith("xrmq up: broken exited")] == [
        "xrmq up: broken exited (exit code 1); 1 crash within 60s, restarting in 0.05s",
        "xrmq up: broken exited (exit code 1); 2 crashes within 60s, restarting in 0.1s",
    ]
    reason = (
        "gave up on broken: 3 crashes within 60s (limit 3); last exit code 1: "
        "xrmq run: this role always fails"
    )
    assert f"xrmq up: {reason}" in output
    assert output[-1] == f"xrmq up: stopped: {reason}"
    assert "steady | xrmq run: stopped steady" in output
    assert processes_mentioning(str(tmp_path)) == []
    assert sorted(p.name for p in tmp_path.iterdir()) == ["edge.toml"]


async def test_a_process_failing_fatally_after_the_checks_is_reported_once_not_restarted(tmp_path):
    config = write_config(
        tmp_path,
        """
[processes.echo]
roles = ["edge_roles:echo"]
[processes.broken]
roles = ["edge_roles:misconfigured"]
after = ["echo"]
[processes.last]
roles = ["edge_roles:idle"]
after = ["broken"]
""",
    )
    bus = f"ipc://{tmp_path}/bus"
    up = start_up(config)
    try:
        rest = []
        for line in up.stdout:
            rest.append(line.rstrip("\n"))
            if line.startswith("xrmq up: ready"):
                break
        assert "broken=down" in rest[-1] and "last=" in rest[-1]  # startup went on without it
        assert await echo(bus, "p1", "still here") == "echo:still here"
        up.send_signal(signal.SIGTERM)
        rest += up.stdout.read().splitlines()
        assert up.wait(timeout=30) == 1  # the box ran degraded: its exit status says so
    finally:
        reap(up)
    cause = "xrmq run: edge_roles.misconfigured: setting 'threshold' must be > 0"
    reason = f"broken failed fatally (exit code 2, a configuration error: not restarted): {cause}"
    supervisor_lines = [
        line
        for line in rest
        if line.startswith("xrmq up: ")
        and "broken" in line
        and not line.startswith("xrmq up: ready")
    ]
    assert supervisor_lines == [
        f'xrmq up: {reason}; left DOWN (on_give_up = "stay_down"),'
        " the other processes keep running",
        f"xrmq up: stopped; left down: {reason}",
    ]
    assert rest[-1] == f"xrmq up: stopped; left down: {reason}"
    assert processes_mentioning(str(tmp_path)) == []


def test_a_fatal_failure_of_a_stop_box_process_stops_the_box_at_once(tmp_path):
    config = write_config(
        tmp_path,
        """
[processes.steady]
roles = ["edge_roles:idle"]
[processes.broken]
roles = ["edge_roles:misconfigured"]
after = ["steady"]
on_give_up = "stop_box"
""",
    )
    up = start_up(config)
    try:
        output = up.stdout.read().splitlines()
        assert up.wait(timeout=30) == 1
    finally:
        reap(up)
    reason = (
        "broken failed fatally (exit code 2, a configuration error: not restarted): "
        "xrmq run: edge_roles.misconfigured: setting 'threshold' must be > 0"
    )
    assert [line for line in output if line.startswith("xrmq up: ") and "broken" in line] == [
        f"xrmq up: {reason}",
        f"xrmq up: stopped: {reason}",
    ]
    assert sum("broken | xrmq run: edge_roles.misconfigured" in line for line in output) == 1
    assert processes_mentioning(str(tmp_path)) == []


class Reports(Agent):
    """Keeps the supervisor's reports; ``down`` is set once one shows ``process`` down."""

    def __init__(self, process: str) -> None:
        self.process = process
        self.down = asyncio.Event()
        self.report: SupervisorReport | None = None

    def handlers(self) -> dict:
        return {SUPERVISOR_TOPIC: self.on_report}

    async def on_report(self, report: SupervisorReport, ctx: RuntimeContext) -> None:
        state = report.by_process().get(self.process)
        if state is not None and state.state == "down":
            self.report = report
            self.down.set()


async def test_a_process_over_its_crash_limit_stays_down_while_the_others_keep_answering(tmp_path):
    config = write_config(
        tmp_path,
        """
[processes.echo]
roles = ["edge_roles:echo"]
[processes.flapping]
roles = ["edge_roles:crash"]
""",
        restart="max_crashes = 3",
    )
    bus = f"ipc://{tmp_path}/bus"
    up = start_up(config)
    try:
        expect_line(up, "xrmq up: started echo")
        down = expect_line(up, "xrmq up: gave up on flapping")
        reason = "gave up on flapping: 3 crashes within 60s (limit 3); last exit code 3"
        assert down.startswith(f"xrmq up: {reason}")
        assert down.endswith(
            'left DOWN (on_give_up = "stay_down"), the other processes keep running'
        )
        reports = Reports("flapping")
        runtime = AgentRuntime(bus)
        runtime.register("reports", reports)
        async with runtime:
            await asyncio.wait_for(reports.down.wait(), 20)  # what `xrmq top` shows
            assert await echo(bus, "p1", "still here") == "echo:still here"
        states = reports.report.by_process()
        assert states["flapping"].reason.startswith(reason) and states["flapping"].pid == 0
        assert states["echo"].state == "running" and states["bus"].state == "running"
        up.send_signal(signal.SIGTERM)
        rest = up.stdout.read().splitlines()
        assert up.wait(timeout=30) == 1  # the box ran degraded: its exit status says so
    finally:
        reap(up)
    assert rest[-1].startswith(f"xrmq up: stopped; left down: {reason}")
    assert "echo | xrmq run: stopped echo" in rest
    assert processes_mentioning(str(tmp_path)) == []
    assert sorted(p.name for p in tmp_path.iterdir()) == ["edge.toml"]


class Ticks(Agent):
    """Counts the supervisor's reports, keeping the last one."""

    def __init__(self, wanted: int) -> None:
        self.wanted = wanted
        self.count = 0
        self.enough = asyncio.Event()
        self.last: SupervisorReport | None = None

    def handlers(self) -> dict:
        return {SUPERVISOR_TOPIC: self.on_report}

    async def on_report(self, report: SupervisorReport, ctx: RuntimeContext) -> None:
        self.count += 1
        self.last = report
        if self.count >= self.wanted:
            self.enough.set()


async def test_a_hung_broker_is_killed_and_restarted_and_nobody_else_is_taken_for_hung(tmp_path):
    config = tmp_path / "edge.toml"
    config.write_text(f"""
[bus]
address = "ipc://{tmp_path}/bus"
[supervisor]
metrics_interval_s = 0.2
liveness_timeout_s = 2.0
[supervisor.restart]
backoff_initial_s = 0.05
[processes.echo]
roles = ["edge_roles:echo"]
""")
    bus = f"ipc://{tmp_path}/bus"
    up = start_up(config)
    try:
        broker = int(expect_line(up, "xrmq up: started bus pid=").rpartition("=")[2])
        expect_line(up, "xrmq up: ready")
        os.kill(broker, signal.SIGSTOP)
        killed = expect_line(up, "xrmq up: bus: ")
        assert "its supervisor report did not come back through it" in killed
        assert killed.endswith("killing it")
        expect_line(up, "xrmq up: restarted bus")
        # Over two liveness timeouts' worth of reports (a tick is 0.2 s) through the new broker:
        ticks = Ticks(25)
        runtime = AgentRuntime(bus)
        runtime.register("ticks", ticks)
        async with runtime:
            await asyncio.wait_for(ticks.enough.wait(), 30)
        echo_state = ticks.last.by_process()["echo"]
        # Its heartbeat was not judged while the broker was down:
        assert (echo_state.state, echo_state.restarts) == ("running", 0)
        assert ticks.last.by_process()["bus"].restarts == 1
        up.send_signal(signal.SIGTERM)
        rest = up.stdout.read().splitlines()
        assert up.wait(timeout=30) == 0
    finally:
        reap(up)
    assert not any("echo: no heartbeat" in line for line in rest)
    assert rest[-1] == "xrmq up: stopped"
