"""Topic tools: ``xrmq echo``, ``xrmq topics``, ``xrmq capture show``, ``xrmq record --topic``
and a replay that leaves out what an edge box derives (issue 17, item 5)."""

from __future__ import annotations

import asyncio
import base64
import json
import subprocess
import sys

import msgspec
import pytest

from xrmq.actors.context.messages import ExchangeRecord, RecordExchanges
from xrmq.actors.edge.recording import MAGIC, encode_record, read_records
from xrmq.actors.edge.topicfilter import replay_filter
from xrmq.actors.runtime import Agent, AgentRuntime, RuntimeContext
from xrmq.schemas import (
    AudioFrame,
    ConversationContextUpdate,
    MessageMetadata,
    ResponseOutput,
    UserQuery,
)
from xrmq.topics import (
    AUDIO_IN_TOPIC,
    QUERY_TOPIC,
    VOICE_OUTPUT_TOPIC,
    Topic,
    context_topic,
    topic_key,
)

from buses import broker_process, expect_line, reap
from raw_client import RawClient

pytestmark = pytest.mark.timeout(60)
CLI = [sys.executable, "-m", "xrmq.actors.cli"]
NOTES = context_topic("notes")


def frames(
    topic: Topic | str, message, participant: str | None, seq: int, source: str = "test"
) -> list[bytes]:
    """A message's wire frames; an internal topic by name only (binding a ``Topic`` to a name
    is process-wide, and the box binds these names to their own types)."""
    metadata = MessageMetadata(
        f"m{seq}", source, "rec", 1, seq, 1_000_000 + seq, participant_id=participant
    )
    name = topic if isinstance(topic, str) else topic.name
    payload = msgspec.msgpack.encode(message) if isinstance(topic, str) else topic.encode(message)
    return [topic_key(name, participant), msgspec.msgpack.encode(metadata), payload]


def write_capture(path, messages) -> None:
    path.write_bytes(MAGIC + b"".join(encode_record(1_000 + i, f) for i, f in enumerate(messages)))


SESSION = [
    frames(NOTES, ConversationContextUpdate("Kettle on."), "p1", 1, "kettle"),
    frames(QUERY_TOPIC, UserQuery("Is the kettle on?", 5), "p1", 2, "text-input"),
    frames("route.conversation.aid", {}, "p1", 3),
    frames("_inbox.box", None, "p1", 4),
    frames("context.view", {"section": "x"}, "p1", 5),
    frames(
        VOICE_OUTPUT_TOPIC,
        ResponseOutput("reply", "Yes.", request_id="m2", response_id="r1", final=False),
        "p1",
        6,
        "conversation",
    ),
    frames(
        VOICE_OUTPUT_TOPIC,
        ResponseOutput("reply", "", request_id="m2", response_id="r1"),
        "p1",
        7,
        "conversation",
    ),
]


def test_a_replay_publishes_what_enters_a_box_and_leaves_out_what_it_derives():
    default = replay_filter()
    names = [
        "notes",
        "voice.query",
        "voice.interrupted",
        "participant.left",
        "route.conversation.aid",
        "_inbox.box",
        "_probe.x",
        "context.view",
        "xrmq.metrics",
        "voice.output",
        "voice.turn_ended",
    ]
    assert [name for name in names if default.admits(name)] == [
        "notes",
        "voice.query",
        "voice.interrupted",
        "participant.left",
    ]
    assert [name for name in names if replay_filter(["voice.*"]).admits(name)] == [
        "voice.query",
        "voice.interrupted",
        "voice.output",
        "voice.turn_ended",
    ]
    assert [name for name in names if replay_filter(exclude=["notes"]).admits(name)] == [
        "voice.query",
        "voice.interrupted",
        "participant.left",
    ]


class Everything(Agent):
    def __init__(self, *topics: Topic, expected: int) -> None:
        self._handlers = dict.fromkeys(topics, self.on_message)
        self.seen: list[str] = []
        self.expected = expected
        self.done = asyncio.Event()

    def handlers(self):
        return self._handlers

    async def on_message(self, message, ctx: RuntimeContext) -> None:
        self.seen.append(ctx.topic.name)
        if len(self.seen) >= self.expected:
            self.done.set()


async def test_replay_by_default_sends_only_the_inputs_and_only_sends_what_only_names(tmp_path):
    capture = tmp_path / "session.cap"
    write_capture(capture, SESSION)
    with broker_process() as bus:
        watcher = Everything(NOTES, QUERY_TOPIC, VOICE_OUTPUT_TOPIC, expected=2)
        runtime = AgentRuntime(bus)
        runtime.register("everything", watcher)
        async with runtime:
            done = await asyncio.to_thread(
                subprocess.run,
                [*CLI, "replay", "--bus", bus, "--speed", "inf", str(capture)],
                capture_output=True,
                text=True,
                timeout=30,
            )
            assert (
                done.stdout.strip()
                == f"xrmq replay: sent 2 of 2 messages from {capture} (5 left out by topic)"
            )
            await asyncio.wait_for(watcher.done.wait(), 10)
            watcher.seen.clear()
            watcher.done.clear()
            watcher.expected = 2
            only = await asyncio.to_thread(
                subprocess.run,
                [
                    *CLI,
                    "replay",
                    "--bus",
                    bus,
                    "--speed",
                    "inf",
                    "--only",
                    "voice.output",
                    str(capture),
                ],
                capture_output=True,
                text=True,
                timeout=30,
            )
            assert (
                only.stdout.strip()
                == f"xrmq replay: sent 2 of 2 messages from {capture} (5 left out by topic)"
            )
            await asyncio.wait_for(watcher.done.wait(), 10)
    assert watcher.seen == ["voice.output", "voice.output"]


def test_capture_show_prints_every_message_decoded(tmp_path):
    capture = tmp_path / "session.cap"
    write_capture(capture, SESSION)
    text = subprocess.run(
        [*CLI, "capture", "show", str(capture)], capture_output=True, text=True, timeout=30
    )
    assert text.returncode == 0, text.stderr
    lines = text.stdout.splitlines()
    assert len(lines) == 7
    assert lines[0].endswith(' notes [p1] kettle: {"text": "Kettle on."}')
    as_json = subprocess.run(
        [*CLI, "capture", "show", "--json", str(capture)],
        capture_output=True,
        text=True,
        timeout=30,
    )
    last = json.loads(as_json.stdout.splitlines()[-1])
    assert last["topic"] == "voice.output" and last["payload"]["final"] is True  # a default, shown
    assert (
        last["source"] == "conversation"
        and last["participant"] == "p1"
        and last["message_id"] == "m7"
    )


async def test_record_topic_keeps_only_the_matching_topics(tmp_path):
    capture = tmp_path / "notes.cap"
    with broker_process() as bus:
        recorder = subprocess.Popen(
            [*CLI, "record", "--bus", bus, "--topic", "notes", "--count", "2", str(capture)],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        try:
            expect_line(recorder, "xrmq record: ready")
            async with AgentRuntime(bus) as publisher:
                for index in range(3):
                    publisher.send(
                        context_topic("scene"),
                        ConversationContextUpdate(f"s{index}"),
                        participant_id="p1",
                    )
                    publisher.send(
                        NOTES, ConversationContextUpdate(f"n{index}"), participant_id="p1"
                    )
            assert (
                expect_line(recorder, "xrmq record: wrote")
                == f"xrmq record: wrote 2 messages to {capture}"
            )
        finally:
            reap(recorder)
    with capture.open("rb") as file:
        kept = [record.frames[0].split(b"\x00")[0] for record in read_records(file)]
    assert kept == [b"notes", b"notes"]


async def test_echo_prints_one_participants_messages_of_a_topic_as_json_lines():
    with broker_process() as bus:
        echo = subprocess.Popen(
            [
                *CLI,
                "echo",
                "--bus",
                bus,
                "voice.output",
                "--participant",
                "p1",
                "--json",
                "--count",
                "2",
            ],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        try:
            expect_line(echo, "xrmq echo: ready topic=voice.output participant=p1")
            async with AgentRuntime(bus) as publisher:
                for participant, fragment in (("p2", "Other."), ("p1", "Hello"), ("p1", "")):
                    publisher.send(
                        VOICE_OUTPUT_TOPIC,
                        ResponseOutput(
                            "reply", fragment, request_id="q1", response_id="r1", final=not fragment
                        ),
                        participant_id=participant,
                        source="conversation",
                    )
            stdout, _ = echo.communicate(timeout=20)
        finally:
            reap(echo)
    first, second = (json.loads(line) for line in stdout.splitlines())
    assert (first["participant"], first["payload"]["text"], first["payload"]["final"]) == (
        "p1",
        "Hello",
        False,
    )
    assert (second["payload"]["text"], second["payload"]["final"]) == ("", True)


async def test_topics_lists_each_topic_with_its_messages_publishers_and_participants():
    with broker_process() as bus:
        topics = subprocess.Popen(
            [*CLI, "topics", "--bus", bus, "--window", "1.5"],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        try:
            expect_line(topics, "xrmq topics: ready")
            async with (
                AgentRuntime(bus, name="sensor-a") as a,
                AgentRuntime(bus, name="sensor-b") as b,
            ):
                a.send(NOTES, ConversationContextUpdate("one"), participant_id="p1")
                b.send(NOTES, ConversationContextUpdate("two"), participant_id="p2")
                b.send(
                    context_topic("scene"), ConversationContextUpdate("three"), participant_id="p2"
                )
            stdout, _ = topics.communicate(timeout=20)
        finally:
            reap(topics)
    rows = {
        line.split()[0]: line.split()[1:]
        for line in stdout.splitlines()[1:]
        if line.split()[0] in ("notes", "scene")
    }
    assert rows["notes"][0] == "2" and rows["notes"][2:4] == [
        "2",
        "2",
    ]  # messages; publishers, participants
    assert rows["scene"][0] == "1" and rows["scene"][2:4] == ["1", "1"]


def test_capture_show_prints_bytes_as_length_and_hex_prefix_and_as_base64_in_json(tmp_path):
    identity = bytes(range(40))
    write = RecordExchanges(
        "manager", 1, (ExchangeRecord(identity, "Freezer?", "Minus 80.", 1_000_000),)
    )
    pcm = b"\x01\x00" * 160
    capture = tmp_path / "bytes.cap"
    write_capture(
        capture,
        [
            frames("context.dialogue.write", write, "p1", 1, "manager"),
            frames(AUDIO_IN_TOPIC, AudioFrame(pcm, 16_000, 1, 0, 1_000_000), "p1", 2, "mic"),
        ],
    )
    text = subprocess.run(
        [*CLI, "capture", "show", str(capture)], capture_output=True, text=True, timeout=30
    )
    assert text.returncode == 0, text.stderr
    dialogue, audio = text.stdout.splitlines()
    assert f'"identity": <40 bytes: {identity[:16].hex()}...>' in dialogue
    assert '"request": "Freezer?"' in dialogue
    assert f'"pcm": <320 bytes: {pcm[:16].hex()}...>' in audio
    as_json = subprocess.run(
        [*CLI, "capture", "show", "--json", str(capture)],
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert as_json.returncode == 0, as_json.stderr
    dialogue_json, audio_json = (json.loads(line) for line in as_json.stdout.splitlines())
    exchange = dialogue_json["payload"]["exchanges"][0]
    assert base64.b64decode(exchange["identity"]) == identity
    assert base64.b64decode(audio_json["payload"]["pcm"]) == pcm


async def test_echo_prints_a_dialogue_write_with_its_bytes_identity():
    identity = bytes(range(20))
    write = RecordExchanges("manager", 1, (ExchangeRecord(identity, "Freezer?", "Minus 80.", 1),))
    with broker_process() as bus:
        echo = subprocess.Popen(
            [*CLI, "echo", "--bus", bus, "context.dialogue.write", "--count", "1"],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        try:
            expect_line(echo, "xrmq echo: ready topic=context.dialogue.write")
            client = RawClient(bus)
            try:
                client.wait_ready()
                payload = msgspec.to_builtins(write, builtin_types=(bytes,))  # bytes stay bin
                client.send("context.dialogue.write", "p1", 1, payload)
            finally:
                client.context.destroy(linger=0)
            stdout, stderr = echo.communicate(timeout=20)
        finally:
            reap(echo)
    assert echo.returncode == 0, stderr
    assert f'"identity": <20 bytes: {identity[:16].hex()}...>' in stdout
