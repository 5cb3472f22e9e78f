"""The secure edge box: ``xrmq up --init-keys`` with a curve config on tcp loopback answers
``xrmq say --key``, takes a sensor's note, drops its forgeries (``xrmq top`` shows the
broker's counters), holds alice's key to participant alice (``say`` as carol is not
answered), runs the SDK's example (docs/context.md) over the bus; and the unsafe default
is refused."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import stat
import subprocess
import sys
from pathlib import Path

import pytest

from xrmq.actors import runtime as xrmq_runtime

# -- the SDK example's imports, changed to xrmq --------------------------------------------
from xrmq.actors.context import ContextManager
from xrmq.actors.conversation import Conversation
from xrmq.actors.models import ScriptedLLM
from xrmq.actors.routing import AgentRouter, SingleDestination
from xrmq.schemas import AgentTurn
from xrmq.topics import VOICE_OUTPUT_TOPIC

from buses import expect_line, reap
from secure_bus import free_tcp_bus

CLI = [sys.executable, "-m", "xrmq.actors.cli"]
EXAMPLES = Path(__file__).parent.parent / "examples"

SECURE_CONFIG = """
[bus]
address = "{bus}"

[bus.security]
mode = "curve"
keys = "keys"

[bus.identities.alice]
publish = ["voice.query"]
sources = ["text-input"]
subscribe = ["voice.output", "voice.turn_ended"]
participants = ["alice"]

[bus.identities.sensor]
publish = ["notes", "scene"]
sources = ["*"]

[bus.identities.seed]
publish = ["voice.output"]
sources = ["conversation"]
subscribe = ["voice.output"]

[bus.identities.ops]
subscribe = ["xrmq.metrics", "xrmq.supervisor"]
capture = true

[context.topics.scene]
mode = "summary"

[context.topics.notes]
mode = "incremental"

[destinations.conversation]
description = "General assistant: answers from its own knowledge and the participant's context."

[router]
default = "conversation"

[processes.context]
roles = ["context"]

[processes.compaction]
roles = ["compaction"]
after = ["context"]

[processes.conversation]
roles = ["conversation"]
after = ["context"]

[processes.router]
roles = ["router"]
after = ["conversation"]

[processes.renderer]
roles = ["renderer"]
"""


def cli(env: dict, *args: str, timeout: float = 60) -> subprocess.CompletedProcess:
    return subprocess.run([*CLI, *args], capture_output=True, text=True, env=env, timeout=timeout)


@pytest.mark.timeout(240)
async def test_a_curve_edge_box_from_init_keys_answers_say_with_a_key_and_runs_seed_000(tmp_path):
    bus = free_tcp_bus()
    config = tmp_path / "edge.toml"
    config.write_text(SECURE_CONFIG.format(bus=bus))
    keys = tmp_path / "keys"
    env = {**os.environ, "XRMQ_LOG_LEVEL": "WARNING"}
    for client in ("alice", "sensor", "seed", "ops"):
        made = cli(env, "keys", "new", client, "--dir", str(keys))
        assert made.returncode == 0, made.stderr
    assert stat.S_IMODE((keys / "alice.key_secret").stat().st_mode) == 0o600
    up = subprocess.Popen(
        [*CLI, "up", "--init-keys", str(config)],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        env=env,
    )
    try:
        created = expect_line(up, "xrmq up: created key pairs")
        assert created.endswith(
            "broker, context, compaction, conversation, router, renderer, xrmq-up, xrmq-context"
        )
        expect_line(up, "xrmq up: ready")
        listed = cli(env, "keys", "list", str(keys)).stdout.splitlines()
        assert [line.split("\t")[0] for line in listed] == sorted(
            [
                "alice",
                "broker",
                "compaction",
                "context",
                "conversation",
                "ops",
                "renderer",
                "router",
                "seed",
                "sensor",
                "xrmq-context",
                "xrmq-up",
            ]
        )

        as_alice = [
            "--bus",
            bus,
            "--key",
            str(keys / "alice.key_secret"),
            "--server-key",
            str(keys / "broker.key"),
            "--participant",
            "alice",
        ]
        answer = cli(env, "say", *as_alice, "--timeout", "30", "Hello there.")
        assert answer.returncode == 0, answer.stderr
        assert answer.stdout.strip()

        sensor_env = {
            **env,
            "XRMQ_KEY": str(keys / "sensor.key_secret"),
            "XRMQ_SERVER_KEY": str(keys / "broker.key"),
        }
        as_ops = [
            "--bus",
            bus,
            "--key",
            str(keys / "ops.key_secret"),
            "--server-key",
            str(keys / "broker.key"),
        ]
        record = subprocess.Popen(
            [*CLI, "record", *as_ops, str(tmp_path / "capture.xrmq"), "--count", "2"],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=env,
        )
        try:
            # the ops identity may read the capture socket
            expect_line(record, "xrmq record: ready")
            sensor = subprocess.run(
                [
                    sys.executable,
                    str(EXAMPLES / "sensor_publisher.py"),
                    bus,
                    "--participant",
                    "alice",
                ],
                capture_output=True,
                text=True,
                env=sensor_env,
                timeout=60,
            )
            assert sensor.returncode == 0, sensor.stderr
            assert record.wait(timeout=30) == 0
            wrote = expect_line(record, "xrmq record: wrote")
            assert wrote == f"xrmq record: wrote 2 messages to {tmp_path / 'capture.xrmq'}"
        finally:
            reap(record)
        foreign = subprocess.run(
            [
                sys.executable,
                str(EXAMPLES / "foreign_client.py"),
                bus,
                "p1",
                "The reagent kit is in fridge 2.",
            ],
            capture_output=True,
            text=True,
            env=sensor_env,
            timeout=60,
        )
        assert foreign.returncode == 0, foreign.stderr
        forged = cli(
            sensor_env,
            "publish",
            "--bus",
            bus,
            "voice.query",
            "--participant",
            "p1",
            "--source",
            "router",
            "forged turn",
        )
        assert forged.returncode == 0, forged.stderr  # fire and forget: the broker drops it
        kettle = cli(
            env, "say", *as_alice, "--timeout", "30", "What temperature is the kettle set to?"
        )
        assert kettle.returncode == 0, kettle.stderr
        assert "85" in kettle.stdout  # the sensor's note reached the participant's context
        # alice's key is bound to participant alice: asking as carol gets nothing back
        as_carol = [*as_alice[:-1], "carol"]
        carol = cli(env, "say", *as_carol, "--timeout", "30", "What is carol's door code?")
        assert carol.returncode != 0 and "85" not in carol.stdout
        assert "may it subscribe to voice.output, voice.turn_ended as participant 'carol'" in (
            carol.stderr
        )

        # the broker, five processes and xrmq up's own runtime
        top = cli(env, "top", *as_ops, "--once", "--json", "--expect", "7", "--window", "30")
        assert top.returncode == 0, top.stderr
        rows = {row["runtime"]: row for row in json.loads(top.stdout)}
        assert {
            name: rows[name]["identity"]
            for name in ("broker", "context", "compaction", "conversation", "router", "renderer")
        } == {
            "broker": "broker",
            "context": "context",
            "compaction": "compaction",
            "conversation": "conversation",
            "router": "router",
            "renderer": "renderer",
        }
        assert rows["broker"]["dropped"]["sensor"] == 1
        assert set(rows["broker"]["dropped"]) == {"sensor", "alice"}  # alice: its carol probes
        assert set(rows["broker"]["denied"]) == {"alice"}  # alice: its carol subscriptions

        seed_result, printed = await run_seed_example(bus, keys, up)
        assert seed_result.status == "answered"
        assert "15:30" in printed  # the stack's renderer played the seed's answer, over CURVE

        up.send_signal(signal.SIGTERM)
        rest = up.stdout.read().splitlines()
        assert up.wait(timeout=60) == 0
        assert rest[-1] == "xrmq up: stopped"
    finally:
        reap(up)


class SeedRuntime(xrmq_runtime.AgentRuntime):
    """``AgentRuntime()`` of the seed's text, on the secure bus as identity ``seed``."""

    connection: tuple[str, Path] | None = None

    def __init__(self) -> None:
        assert SeedRuntime.connection is not None, "set by the test before the seed's text runs"
        bus, keys = SeedRuntime.connection
        super().__init__(bus, key=keys / "seed.key_secret", server_key=keys / "broker.key")


async def run_seed_example(bus: str, keys: Path, up: subprocess.Popen):
    SeedRuntime.connection = (bus, keys)
    AgentRuntime = SeedRuntime
    llm = ScriptedLLM("The calibration meeting is at 15:30 in lab 2.")
    decisions = SingleDestination()

    async def publish_router_control(turn: AgentTurn, route: str | None, text: str) -> None:
        raise AssertionError(f"router text: {text}")

    # ---- the SDK's example (docs/context.md), verbatim from here ------------------------------
    runtime = AgentRuntime()

    context = ContextManager(llm)
    conversation = Conversation(
        llm,
        context=context,
        instructions="Answer general questions about the lab.",
        runtime=runtime,
        output_topic=VOICE_OUTPUT_TOPIC,
    )
    front_end = AgentRouter(
        {"conversation": conversation}, decisions, output=publish_router_control
    )

    async def participant_left(participant_id: str) -> None:
        await front_end.participant_left(participant_id)
        await context.clear(participant_id)

    async with runtime:
        try:
            result = await front_end.handle(
                AgentTurn("participant-1", "turn-1", "When is the calibration meeting?"),
            )
        finally:
            await front_end.stop()
    await conversation.close()
    await context.close()
    # ---- end of the seed's example ---------------------------------------------------------
    # the renderer prints what it plays as it streams: read until the answer is out
    played: list[str] = []
    while not ("participant-1" in "".join(played) and "15:30" in "".join(played)):
        played.append(await asyncio.to_thread(expect_line, up, "renderer | "))
    return result, "".join(played)


@pytest.mark.parametrize("address", ["tcp://0.0.0.0:7300", "tcp://*:7300", "tcp://10.1.2.3:7300"])
def test_a_plain_tcp_bus_beyond_loopback_is_refused_naming_the_fix(tmp_path, address):
    config = tmp_path / "edge.toml"
    config.write_text(f'[bus]\naddress = "{address}"\n')
    result = cli({**os.environ}, "up", "--check", str(config))
    assert result.returncode == 2
    assert result.stderr.strip() == (
        f"xrmq up: {config}: bus.address: '{address}' binds tcp beyond loopback without security: "
        'anyone who can reach it owns the bus; set [bus.security] mode = "curve" '
        "(or insecure = true to accept that)"
    )


def test_insecure_true_accepts_it_and_check_says_so(tmp_path):
    config = tmp_path / "edge.toml"
    stack = SECURE_CONFIG[SECURE_CONFIG.index("[context.topics.scene]") :]
    config.write_text(
        '[bus]\naddress = "tcp://0.0.0.0:7300"\n\n[bus.security]\ninsecure = true\n\n' + stack
    )
    result = cli({**os.environ}, "up", "--check", str(config))
    assert result.returncode == 0, result.stderr
    assert (
        "WARNING: insecure = true: tcp://0.0.0.0:7300 is open to anyone who reaches it"
        in result.stdout
    )


def test_check_of_a_curve_config_without_keys_names_init_keys(tmp_path):
    config = tmp_path / "edge.toml"
    config.write_text(SECURE_CONFIG.format(bus="tcp://127.0.0.1:7300"))
    result = cli({**os.environ}, "up", "--check", str(config))
    assert result.returncode == 2
    assert "bus.security.secret_key" in result.stderr and "xrmq up --init-keys" in result.stderr


def test_xrmq_bus_alone_refuses_a_plain_tcp_bind_beyond_loopback():
    result = cli({**os.environ}, "bus", "--bus", "tcp://0.0.0.0:7300")
    assert result.returncode == 2
    assert result.stderr.strip() == (
        "xrmq bus: --bus: 'tcp://0.0.0.0:7300' binds tcp beyond loopback without security: "
        "anyone who can reach it owns the bus; give --config with [bus.security] "
        'mode = "curve" (or --insecure to accept that)'
    )
