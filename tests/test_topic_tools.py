"""Topic tools: ``xrmq echo``, ``xrmq topics``, ``xrmq capture show``, ``xrmq record --topic``
and a replay that leaves out what an edge box derives (issue 17, item 5)."""

from __future__ import annotations

import asyncio
import base64
import json
import re
import subprocess
import sys

import msgspec
import pytest

from xrmq.actors.context.messages import ExchangeRecord, RecordExchanges
from xrmq.actors.edge.capture_file import MAGIC, encode_record, read_records
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
        [*CLI, "capture", "show", "--all", str(capture)],
        capture_output=True,
        text=True,
        timeout=30,
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
        [*CLI, "capture", "show", "--all", str(capture)],
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert text.returncode == 0, text.stderr
    dialogue, audio = text.stdout.splitlines()
    assert f'"identity": <40 bytes: {identity[:16].hex()}...>' in dialogue
    assert '"request": "Freezer?"' in dialogue
    assert f'"pcm": <320 bytes: {pcm[:16].hex()}...>' in audio
    as_json = subprocess.run(
        [*CLI, "capture", "show", "--all", "--json", str(capture)],
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


# Issue 33, item 4: the topic tools show what a user needs. Internal topics (the runtime's
# own traffic: ``xrmq.topics.is_internal``) are hidden unless --all, and the output says how
# many were; --topic GLOB and --participant P narrow what is shown.

HIDDEN = re.compile(r"^\+(\d+) internal topics? hidden: --all shows them$")


def test_is_internal_holds_every_topic_the_runtime_makes_itself_and_no_user_topic():
    from xrmq.actors.context.messages import ContextTopics
    from xrmq.actors.routing.remote_protocol import DestinationTopics
    from xrmq.actors.tools.server import ToolTopics
    from xrmq.actors.tools.store import TranscriptTopics
    from xrmq.topics import STANDARD_TOPICS, is_internal

    context = ContextTopics("context")
    route = DestinationTopics.of("conversation")
    tools = ToolTopics.of("search")
    transcripts = TranscriptTopics.of("conversation")
    made_by_the_runtime = [
        "_inbox.router",
        "_inbox.*",
        "_probe.raw-1234",
        "route.conversation.events.8a2348cebb354edf98d50349b11c7b17",
        *(topic.name for topic in (route.aid, route.aids, route.turn, route.status)),
        *(topic.name for topic in (context.view, context.dialogue_write, context.dialogue_load)),
        context.topic_write("notes").name,
        context.replica("e030457c56ad").name,
        context.worker_jobs(0).name,
        *(topic.name for topic in (tools.list, tools.call, tools.cancel)),
        transcripts.write.name,
        transcripts.load.name,
        *(topic.name for topic in STANDARD_TOPICS if topic.name.startswith("xrmq.")),
    ]
    assert [name for name in made_by_the_runtime if not is_internal(name)] == []
    users = [
        *(topic.name for topic in STANDARD_TOPICS if not topic.name.startswith("xrmq.")),
        "notes",
        "scene",
        "kitchen.sensors",
        "contexts",
        "routes.plan",
        "transcript",
    ]
    assert [name for name in users if is_internal(name)] == []


def test_a_replay_leaves_out_every_internal_topic_by_default():
    from xrmq.topics import INTERNAL_TOPICS

    internal = ["tools.search.call", "conversation.transcript.write", "_probe.x", "xrmq.turns"]
    assert [name for name in internal if replay_filter().admits(name)] == []
    assert [p for p in INTERNAL_TOPICS if replay_filter().admits(p.replace("*", "x"))] == []
    assert replay_filter(["tools.*"]).admits("tools.search.call")


def topics_rows(stdout: str) -> dict[str, list[str]]:
    """``xrmq topics``' table rows by topic (header and footer lines left out)."""
    lines = stdout.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith("TOPIC ")) + 1
    return {
        line.split()[0]: line.split()[1:]
        for line in lines[start:]
        if line and not line[0].isdigit() and not line.startswith("+")
    }


def hidden_count(text: str) -> int | None:
    found = [HIDDEN.match(line) for line in text.splitlines()]
    counts = [int(match.group(1)) for match in found if match]
    assert len(counts) <= 1, text
    return counts[0] if counts else None


async def test_topics_hides_internal_topics_says_how_many_and_filters_by_glob_and_participant():
    views = {
        "default": [],
        "all": ["--all"],
        "narrowed": ["--topic", "notes", "--topic", "voice.*,audio.*", "--participant", "p2"],
        "internal": ["--all", "--topic", "route.*"],
    }
    with broker_process("--metrics-interval", "0.1") as bus:
        procs = {
            view: subprocess.Popen(
                [*CLI, "topics", "--bus", bus, "--window", "3", *arguments],
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                text=True,
            )
            for view, arguments in views.items()
        }
        try:
            for proc in procs.values():
                expect_line(proc, "xrmq topics: ready")
            client = RawClient(bus)
            try:
                client.wait_ready()
                for seq, (topic, participant) in enumerate(
                    [
                        ("notes", "p1"),
                        ("voice.query", "p2"),
                        ("route.conversation.aid", "p1"),
                        ("_inbox.box", "p1"),
                        ("context.view", "p1"),
                    ],
                    1,
                ):
                    client.send(topic, participant, seq, {"text": "x"})
            finally:
                client.close()
            out = {view: proc.communicate(timeout=30)[0] for view, proc in procs.items()}
        finally:
            reap(*procs.values())
    shown = topics_rows(out["default"])
    assert {"notes", "voice.query"} <= set(shown)
    assert not [name for name in shown if name.split(".")[0] in ("route", "_inbox", "context")]
    assert not [name for name in shown if name.startswith(("xrmq.", "_probe."))]
    everything = topics_rows(out["all"])
    assert {"route.conversation.aid", "_inbox.box", "context.view", "xrmq.metrics"} <= set(
        everything
    )
    internal = [name for name in everything if name not in shown]
    assert hidden_count(out["default"]) == len(internal) >= 4
    assert hidden_count(out["all"]) is None
    assert list(topics_rows(out["narrowed"])) == ["voice.query"]
    assert topics_rows(out["narrowed"])["voice.query"][0] == "1"
    assert list(topics_rows(out["internal"])) == ["route.conversation.aid"]


async def test_capture_show_hides_internal_topics_of_a_recording_and_filters_it(tmp_path):
    capture = tmp_path / "session.cap"
    sent = [
        ("notes", "p1"),
        ("voice.query", "p2"),
        ("xrmq.metrics", None),
        ("route.conversation.aid", "p1"),
        ("_inbox.box", "p1"),
        ("xrmq.metrics", None),
        ("context.view", "p2"),
        ("voice.query", "p1"),
    ]
    with broker_process() as bus:
        recorder = subprocess.Popen(
            [*CLI, "record", "--bus", bus, "--count", str(len(sent)), str(capture)],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        try:
            expect_line(recorder, "xrmq record: ready")
            client = RawClient(bus)
            try:
                client.wait_ready()
                for seq, (topic, participant) in enumerate(sent, 1):
                    client.send(topic, participant, seq, {"text": f"m{seq}"})
            finally:
                client.close()
            assert expect_line(recorder, "xrmq record: wrote").startswith(
                f"xrmq record: wrote {len(sent)} messages"
            )
        finally:
            reap(recorder)

    def show(*arguments: str) -> tuple[list[tuple[str, str]], str]:
        done = subprocess.run(
            [*CLI, "capture", "show", "--json", *arguments, str(capture)],
            capture_output=True,
            text=True,
            timeout=30,
        )
        assert done.returncode == 0, done.stderr
        messages = [json.loads(line) for line in done.stdout.splitlines()]
        return [(m["topic"], m["participant"]) for m in messages], done.stderr

    shown, note = show()
    assert shown == [("notes", "p1"), ("voice.query", "p2"), ("voice.query", "p1")]
    assert "+5 messages on 4 internal topics hidden: --all shows them" in note
    everything, note = show("--all")
    assert everything == [(topic, participant) for topic, participant in sent]
    assert "hidden" not in note
    assert show("--participant", "p1")[0] == [("notes", "p1"), ("voice.query", "p1")]
    assert show("--topic", "voice.*")[0] == [("voice.query", "p2"), ("voice.query", "p1")]
    assert show("--all", "--topic", "xrmq.*,_inbox.*", "--participant", "p1")[0] == [
        ("_inbox.box", "p1")
    ]
    assert show("--topic", "voice.*", "--participant", "p2")[0] == [("voice.query", "p2")]
    narrowed, note = show("--participant", "p2")
    assert narrowed == [("voice.query", "p2")]
    assert "+1 message on 1 internal topic hidden: --all shows them" in note  # context.view p2


@pytest.mark.parametrize(
    ("command", "arguments", "error"),
    [
        (["capture", "show"], ["--topic", ""], "argument --topic: must be"),
        (["capture", "show"], ["--topic", "voice.*,,notes"], "argument --topic: empty pattern"),
        (["capture", "show"], ["--topic", "voice.[ab"], "argument --topic: unclosed '['"),
        (["capture", "show"], ["--participant", ""], "argument --participant: must be"),
        (["topics"], ["--topic", "voice.*,"], "argument --topic: empty pattern"),
        (["topics"], ["--topic", "  "], "argument --topic: must be"),
        (["topics"], ["--participant", " "], "argument --participant: must be"),
        (["record"], ["--topic", "voice.[ab"], "argument --topic: unclosed '['"),
        (["replay"], ["--only", "notes,"], "argument --only: empty pattern"),
        (["replay"], ["--exclude", " "], "argument --exclude: must be"),
        (["echo", "voice.output"], ["--participant", ""], "argument --participant: must be"),
    ],
)
def test_a_bad_topic_glob_or_participant_is_refused_naming_the_argument(
    tmp_path, command, arguments, error
):
    file = [str(tmp_path / "none.cap")] if command[0] in ("capture", "record", "replay") else []
    if command[0] != "capture":
        file.extend(["--bus", f"ipc://{tmp_path}/bus"])
    done = subprocess.run(
        [*CLI, *command, *arguments, *file], capture_output=True, text=True, timeout=30
    )
    assert done.returncode == 2 and error in done.stderr, done.stderr
