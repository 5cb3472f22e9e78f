"""``xrmq run``: one process of a config, its readiness line, its shard, and its orderly stop."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys

import pytest

from xrmq.actors.edge.config_loader import decode_config, default_config
from xrmq.actors.edge.process import select_instance
from xrmq.actors.edge.roles import ROLES, resolve_role
from xrmq.actors.runtime import Agent, AgentRuntime, shard_of, subscribe
from xrmq.schemas import ConversationContextUpdate, RuntimeMetrics
from xrmq.topics import METRICS_TOPIC, context_topic

from buses import PROCS, broker_process, expect_line, reap

pytestmark = pytest.mark.timeout(60)

ECHO_TOPIC = context_topic("edge.echo")  # tests/procs/edge_roles.py answers on it
ENV = {**os.environ, "PYTHONPATH": str(PROCS)}


def xrmq_run(*args: str) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, "-m", "xrmq.actors.cli", "run", *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=ENV,
    )


class Heartbeats(Agent):
    """Remembers the first ``RuntimeMetrics`` of one runtime."""

    def __init__(self, runtime: str) -> None:
        self.runtime_name = runtime
        self.seen = asyncio.Event()
        self.first: RuntimeMetrics | None = None

    @subscribe(METRICS_TOPIC)
    async def on_metrics(self, message: RuntimeMetrics, ctx) -> None:
        if message.runtime == self.runtime_name and self.first is None:
            self.first = message
            self.seen.set()


def config_text(bus: str) -> str:
    return f"""
[bus]
address = "{bus}"
[supervisor]
metrics_interval_s = 0.05
[processes.echo]
roles = ["edge_roles:echo"]
replicas = 2
nice = 7
"""


async def test_run_starts_a_replica_at_its_niceness_heartbeats_answers_its_shard_stops_on_sigterm(
    tmp_path,
):
    with broker_process() as bus:
        config = tmp_path / "edge.toml"
        config.write_text(config_text(bus))
        proc = xrmq_run("echo", "--config", str(config), "--shard", "1")
        try:
            assert expect_line(proc, "xrmq run: ready").startswith("xrmq run: ready echo.1 pid=")
            # seven above ours, as far as the kernel goes (19: a suite run under nice -n 19)
            expected = min(os.getpriority(os.PRIO_PROCESS, 0) + 7, 19)
            assert os.getpriority(os.PRIO_PROCESS, proc.pid) == expected
            watch = Heartbeats("echo.1")
            runtime = AgentRuntime(bus)
            runtime.register("watch", watch)
            async with runtime:
                key = next(f"p{i}" for i in range(100) if shard_of(f"p{i}", 2) == 1)
                other = next(f"p{i}" for i in range(100) if shard_of(f"p{i}", 2) == 0)
                reply = await runtime.ask(
                    ECHO_TOPIC,
                    ConversationContextUpdate("hi"),
                    participant_id=key,
                    reply_type=str,
                    timeout=10,
                )
                assert reply == "echo.1:hi"
                with pytest.raises(TimeoutError):  # shard 0's keys belong to the other replica
                    await runtime.ask(
                        ECHO_TOPIC,
                        ConversationContextUpdate("hi"),
                        participant_id=other,
                        timeout=0.3,
                    )
                await watch.seen.wait()
            assert watch.first.pid == proc.pid
            proc.send_signal(signal.SIGTERM)
            assert expect_line(proc, "xrmq run: stopped") == "xrmq run: stopped echo.1"
            assert proc.wait(timeout=10) == 0
        finally:
            reap(proc)


def test_run_refuses_an_unknown_target_or_shard(tmp_path):
    config = tmp_path / "edge.toml"
    config.write_text(config_text("ipc:///nowhere/bus"))
    for args, message in (
        (
            ("nobody",),
            f"xrmq run: 'nobody' is neither a process of {config} (echo) nor a role: unknown role "
            "'nobody'",
        ),
        (
            ("echo", "--shard", "2"),
            "xrmq run: --shard: process 'echo' has 2 replica(s); shard must be in [0, 2)",
        ),
    ):
        result = subprocess.run(
            [sys.executable, "-m", "xrmq.actors.cli", "run", *args, "--config", str(config)],
            capture_output=True,
            text=True,
            timeout=30,
            env=ENV,
        )
        assert result.returncode == 2
        assert result.stderr.startswith(message), result.stderr


def test_a_role_that_is_not_a_process_runs_alone_with_one_replica():
    config = decode_config({"processes": {"echo": {"roles": ["edge_roles:idle"], "replicas": 3}}})
    assert select_instance(config, "echo", 2).runtime_name == "echo.2"
    ROLES["test-only"] = ROLES.get("test-only", lambda runtime, config, process: None)
    try:
        alone = select_instance(config, "test-only", 0)
        assert (alone.runtime_name, alone.shards, alone.spec.roles) == (
            "test-only",
            1,
            ["test-only"],
        )
        with pytest.raises(ValueError, match="has one replica"):
            select_instance(config, "test-only", 1)
    finally:
        del ROLES["test-only"]


def test_resolve_role_names_what_is_wrong():
    assert resolve_role("xrmq.actors.edge.config_loader:default_config") is default_config
    with pytest.raises(LookupError, match="unknown role 'nope'"):
        resolve_role("nope")
    with pytest.raises(LookupError, match="cannot import 'no.such.module'"):
        resolve_role("no.such.module:build")
    with pytest.raises(LookupError, match="'xrmq.actors.edge.config' has no function 'missing'"):
        resolve_role("xrmq.actors.edge.config:missing")
