"""Clients of a CURVE edge box: every command takes the bus, the broker's public key and its
identity's key from the config (``--config``/``$XRMQ_CONFIG``, ``--identity``); ``chat --key``
and ``listen --key``; ``xrmq context`` as its least-privilege default identity
``xrmq-context``; ``xrmq topics`` with the secure broker's subscriber counts; and a replay
onto the secure bus, re-sourced as the replaying identity or refused naming the rule.

One box (``xrmq up --init-keys`` on tcp loopback) serves the whole module: it takes a
while to start on a loaded machine, and every test here is a client of it.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from buses import expect_line, reap
from secure_bus import free_tcp_bus

CLI = [sys.executable, "-m", "xrmq.actors.cli"]

CONFIG = """
[bus]
address = "{bus}"

[bus.security]
mode = "curve"
keys = "keys"

[bus.identities.alice]
publish = ["voice.query"]
sources = ["text-input"]
subscribe = ["voice.output", "voice.turn_ended"]

[bus.identities.listener]
subscribe = ["voice.output", "voice.query", "voice.interrupted"]

[bus.identities.sensor]
publish = ["notes"]
sources = ["*"]

[bus.identities.ops]
subscribe = ["xrmq.metrics", "xrmq.supervisor", "context.view"]
capture = true

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
"""


@dataclass
class Box:
    bus: str
    config: Path
    keys: Path
    env: dict[str, str]

    def cli(
        self,
        *args: str,
        env: dict[str, str] | None = None,
        stdin: str | None = None,
        timeout: float = 90,
    ) -> subprocess.CompletedProcess:
        return subprocess.run(
            [*CLI, *args],
            capture_output=True,
            text=True,
            input=stdin,
            env=env or self.env,
            timeout=timeout,
        )

    def popen(self, *args: str) -> subprocess.Popen:
        return subprocess.Popen(
            [*CLI, *args],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            stdin=subprocess.PIPE,
            text=True,
            env=self.env,
        )

    def as_(self, identity: str) -> list[str]:
        return ["--config", str(self.config), "--identity", identity]


@pytest.fixture(scope="module")
def box(tmp_path_factory) -> Iterator[Box]:
    tmp = tmp_path_factory.mktemp("curve-clients")
    bus = free_tcp_bus()
    config = tmp / "edge.toml"
    config.write_text(CONFIG.format(bus=bus))
    keys = tmp / "keys"
    env = {**os.environ, "XRMQ_LOG_LEVEL": "WARNING"}
    for name in ("XRMQ_KEY", "XRMQ_SERVER_KEY", "XRMQ_CONFIG", "XRMQ_IDENTITY", "XRMQ_BUS"):
        env.pop(name, None)
    for client in ("alice", "listener", "sensor", "ops"):
        made = subprocess.run(
            [*CLI, "keys", "new", client, "--dir", str(keys)],
            capture_output=True,
            text=True,
            env=env,
            timeout=60,
        )
        assert made.returncode == 0, made.stderr
    up = subprocess.Popen(
        [*CLI, "up", "--init-keys", str(config)],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        env=env,
    )
    try:
        created = expect_line(up, "xrmq up: created key pairs")
        assert created.endswith("xrmq-up, xrmq-context")  # the context commands' identity too
        expect_line(up, "xrmq up: ready")
        yield Box(bus, config, keys, env)
        up.send_signal(signal.SIGTERM)
        rest, _ = up.communicate(timeout=60)
        assert up.returncode == 0, rest[-3000:]
    finally:
        reap(up)


@pytest.mark.timeout(180)
def test_say_takes_the_bus_the_broker_key_and_its_identitys_key_from_the_config(box):
    answer = box.cli("say", *box.as_("alice"), "--timeout", "60", "Hello there.")
    assert answer.returncode == 0, answer.stderr
    assert answer.stdout.strip()

    from_environment = box.cli(
        "say",
        "--timeout",
        "60",
        "Hello again.",
        env={**box.env, "XRMQ_CONFIG": str(box.config), "XRMQ_IDENTITY": "alice"},
    )
    assert from_environment.returncode == 0, from_environment.stderr
    assert from_environment.stdout.strip()

    nameless = box.cli("say", "--config", str(box.config), "Who am I?")
    assert nameless.returncode == 2
    assert nameless.stderr.strip() == (
        f"xrmq say: --identity: {box.config} is a CURVE bus: name the identity to connect as "
        f"(--identity NAME or $XRMQ_IDENTITY: its key pair {box.keys}/NAME.key_secret), "
        "or give --key FILE"
    )


@pytest.mark.timeout(180)
def test_chat_with_a_key_answers_on_a_curve_bus(box):
    chat = box.popen(
        "chat",
        "--bus",
        box.bus,
        "--key",
        str(box.keys / "alice.key_secret"),
        "--server-key",
        str(box.keys / "broker.key"),
        "--participant",
        "cara",
        "--timeout",
        "60",
    )
    try:
        expect_line(chat, "xrmq chat: ready participant=cara")
        chat.stdin.write("My badge number is 4471.\n")
        chat.stdin.flush()
        first = expect_line(chat, "conversation: ")
        chat.stdin.write("/quit\n")
        chat.stdin.flush()
        assert chat.wait(timeout=30) == 0, chat.stderr.read()[-3000:]
    finally:
        reap(chat)
    assert "4471" in first


@pytest.mark.timeout(180)
def test_listen_with_a_key_renders_the_replies_on_a_curve_bus(box):
    listen = box.popen(
        "listen",
        "--bus",
        box.bus,
        "--key",
        str(box.keys / "listener.key_secret"),
        "--server-key",
        str(box.keys / "broker.key"),
        "--participant",
        "lee",
    )
    try:
        expect_line(listen, "xrmq listen: ready topic=voice.output participant=lee")
        said = box.cli(
            "say",
            *box.as_("alice"),
            "--participant",
            "lee",
            "--timeout",
            "60",
            "The spare key is in drawer 12.",
        )
        assert said.returncode == 0, said.stderr
        last_word = said.stdout.strip().split()[-1].rstrip(".")
        while last_word not in (rendered := expect_line(listen, "[lee] ")):
            pass  # the router's acknowledgement, if any, comes first
    finally:
        reap(listen)
    assert rendered.startswith("[lee] conversation")  # the reply, as it streamed


@pytest.mark.timeout(180)
def test_context_commands_connect_as_xrmq_context_with_least_privilege(box, tmp_path):
    said = box.cli(
        "say",
        *box.as_("alice"),
        "--participant",
        "dee",
        "--timeout",
        "60",
        "My locker is number 318.",
    )
    assert said.returncode == 0, said.stderr
    shown = box.cli("context", "show", "--config", str(box.config), "--participant", "dee")
    assert shown.returncode == 0, shown.stderr
    assert "My locker is number 318." in shown.stdout  # the dialogue, read as xrmq-context
    dumped = box.cli(
        "context",
        "dump",
        "--config",
        str(box.config),
        "--participant",
        "dee",
        "--output",
        str(tmp_path / "dee.dump"),
    )
    assert dumped.returncode == 0, dumped.stderr
    assert b"318" in (tmp_path / "dee.dump").read_bytes()
    cleared = box.cli("context", "clear", "--config", str(box.config), "--participant", "dee")
    assert cleared.returncode == 0, cleared.stderr
    assert cleared.stdout.strip() == "xrmq context: cleared dee"
    shown = box.cli("context", "show", "--config", str(box.config), "--participant", "dee")
    assert "318" not in shown.stdout

    forged = box.cli(
        "publish",
        *box.as_("xrmq-context"),
        "voice.query",
        "--participant",
        "dee",
        "--source",
        "text-input",
        "What is my locker number?",
    )
    assert forged.returncode == 0, forged.stderr  # fire and forget: the broker drops it
    # the broker, four processes and xrmq up's own runtime
    top = box.cli("top", *box.as_("ops"), "--once", "--json", "--expect", "6", "--window", "30")
    assert top.returncode == 0, top.stderr
    broker = next(row for row in json.loads(top.stdout) if row["runtime"] == "broker")
    assert broker["dropped"].get("xrmq-context") == 1  # it may not ask anything


@pytest.mark.timeout(180)
def test_topics_shows_the_secure_brokers_subscriber_counts(box):
    listing = box.cli("topics", *box.as_("ops"), "--all", "--window", "2.5")
    assert listing.returncode == 0, listing.stderr
    rows = {line.split()[0]: line.split()[1:] for line in listing.stdout.splitlines()[2:-1]}
    # the router reads the query and output topics; the conversation the context view
    assert int(rows["voice.query"][-1]) >= 1 and int(rows["voice.output"][-1]) >= 1
    assert int(rows["context.view"][-1]) >= 1
    assert int(rows["xrmq.metrics"][0]) >= 1  # heartbeats crossed the capture stream
    last = listing.stdout.splitlines()[-1]
    assert last.endswith("(subscribers: live subscriptions at the broker)")


@pytest.mark.timeout(240)
def test_a_replay_onto_a_curve_bus_is_resourced_as_the_replaying_identity(box, tmp_path):
    fact = "The spare fuse is in box 9."
    views = box.popen("echo", *box.as_("ops"), "context.view", "--participant", "fay", "--json")
    record = box.popen(
        "record", *box.as_("ops"), str(tmp_path / "note.xrmq"), "--count", "1", "--topic", "notes"
    )
    try:
        expect_line(views, "xrmq echo: ready")
        expect_line(record, "xrmq record: ready")
        noted = box.cli("publish", *box.as_("sensor"), "notes", fact, "--participant", "fay")
        assert noted.returncode == 0, noted.stderr
        assert record.wait(timeout=30) == 0
        expect_line(views, "{")  # the note's view: in the participant's context once

        refused = box.cli(
            "replay", *box.as_("alice"), str(tmp_path / "note.xrmq"), "--speed", "inf"
        )
        assert refused.returncode == 2
        assert refused.stderr.strip() == (
            f"xrmq replay: {tmp_path / 'note.xrmq'}: identity 'alice' may not replay it onto "
            "this CURVE bus: notes (source 'application'): may not publish on 'notes' (grant "
            "it in [bus.identities.alice] publish/sources, or leave those topics out with "
            "--exclude)"
        )

        replayed = box.cli(
            "replay", *box.as_("sensor"), str(tmp_path / "note.xrmq"), "--speed", "inf"
        )
        assert replayed.returncode == 0, replayed.stderr
        assert replayed.stdout.startswith(
            f"xrmq replay: sent 1 of 1 messages from {tmp_path / 'note.xrmq'} as sensor-replay-"
        )
        while True:  # the replayed note reached the context: its view holds the fact twice
            line = expect_line(views, "{")
            if line.count(fact) >= 2:
                break
    finally:
        reap(views, record)
    shown = box.cli("context", "show", "--config", str(box.config), "--participant", "fay")
    assert shown.stdout.count(fact) == 2
