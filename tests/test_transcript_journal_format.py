"""The tools transcript's journal rows hold OpenAI's typed chat messages; a journal written
before (schema version 3: each row the models' ``ChatMessage`` struct) is migrated when it
is opened and its transcripts load as they were."""

from __future__ import annotations

import sqlite3

import msgspec
from tools_doubles import Probe, never_started, probe_reading, session_model, turn

from xrmq.actors.context.store import SCHEMA_VERSION, open_store
from xrmq.actors.models import ChatMessage, ToolCall
from xrmq.actors.models.openai_messages import chat_message
from xrmq.actors.runtime import AgentRuntime
from xrmq.actors.tools.policy import AutoCompactor
from xrmq.actors.tools.store import (
    TranscriptCounters,
    TranscriptHeader,
    TranscriptLoad,
    TranscriptState,
    TranscriptTopics,
    held_messages,
    register_transcripts,
)
from xrmq.actors.tools.tool import Tool
from xrmq.actors.tools.tool_agent import ToolAgent
from xrmq.topics import VOICE_OUTPUT_TOPIC

from router_doubles import FakeContext

TOPICS = TranscriptTopics.of("lab-tools")
OLD_MESSAGES = [
    ChatMessage("user", "Read probe 1."),
    ChatMessage(
        "assistant",
        "",
        tool_calls=(ToolCall("r1", "probe", '{"index": 1}'),),
        reasoning="I should look.",
    ),
    ChatMessage("tool", "Probe 1 reads 3.", tool_call_id="r1"),
    ChatMessage("assistant", "Probe 1 reads 3."),
]


def write_version_3_journal(path) -> None:
    """A journal as schema version 3 wrote it: message rows are ``ChatMessage`` structs."""
    open_store(path).close()
    db = sqlite3.connect(path)
    header = TranscriptHeader("an earlier summary", 120, TranscriptCounters(summary_rounds=1), 2)
    db.execute(
        "INSERT INTO transcripts VALUES (?, ?, ?)",
        ("p1", "lab-tools", msgspec.msgpack.encode(header)),
    )
    for position, message in enumerate(OLD_MESSAGES):
        db.execute(
            "INSERT INTO transcript_messages VALUES (?, ?, ?, ?)",
            ("p1", "lab-tools", position, msgspec.msgpack.encode(message)),
        )
    db.execute("PRAGMA user_version = 3")
    db.commit()
    db.close()


def rows(path) -> list[dict]:
    db = sqlite3.connect(path)
    try:
        blobs = db.execute(
            "SELECT message FROM transcript_messages WHERE participant = 'p1' ORDER BY position"
        ).fetchall()
    finally:
        db.close()
    return [msgspec.msgpack.decode(blob) for (blob,) in blobs]


async def test_a_version_3_journal_is_migrated_and_its_transcript_loads_as_it_was(tmp_path):
    path = tmp_path / "context-0.sqlite3"
    write_version_3_journal(path)
    store = open_store(path)
    assert store._db.execute("PRAGMA user_version").fetchone()[0] == SCHEMA_VERSION == 4
    front = AgentRuntime(name="front")
    back = AgentRuntime(front.address, name="back")
    register_transcripts(back, "lab-tools", store=store)
    async with front, back:
        state = await front.ask(
            TOPICS.load,
            TranscriptLoad(),
            reply_type=TranscriptState,
            participant_id="p1",
            timeout=10,
        )
        agent = ToolAgent(
            session_model(),
            context=FakeContext(),
            runtime=front,
            output_topic=VOICE_OUTPUT_TOPIC,
            tools=[Tool("probe", "Read a probe.", Probe, probe_reading)],
            transcripts="lab-tools",
            compactor=AutoCompactor(enabled=False),
        )
        await agent.answer(turn("t2", "Read probe 2."), started=never_started)
        await agent.mirrored()
    store.close()
    assert [chat_message(m) for m in held_messages(state.messages)] == OLD_MESSAGES
    assert (state.summary, state.total_tokens, state.revision) == ("an earlier summary", 120, 2)
    on_disk = rows(path)
    assert on_disk[1] == {
        "role": "assistant",
        "content": "",
        "tool_calls": [
            {
                "id": "r1",
                "type": "function",
                "function": {"name": "probe", "arguments": '{"index": 1}'},
            }
        ],
        "reasoning_content": "I should look.",
    }
    assert on_disk[2] == {"role": "tool", "content": "Probe 1 reads 3.", "tool_call_id": "r1"}
    # The continued transcript's new rows are typed dicts too, after the migrated ones.
    assert len(on_disk) == len(OLD_MESSAGES) + 4
    assert on_disk[4] == {"role": "user", "content": "Read probe 2."}
    assert on_disk[5]["tool_calls"][0]["type"] == "function"
    assert (
        on_disk[6]["role"] == "tool"
        and on_disk[6]["tool_call_id"] == on_disk[5]["tool_calls"][0]["id"]
    )


def test_a_journal_row_that_is_no_chat_message_is_quarantined_not_fatal(tmp_path):
    path = tmp_path / "context-0.sqlite3"
    write_version_3_journal(path)
    db = sqlite3.connect(path)
    db.execute(
        "UPDATE transcript_messages SET message = ? WHERE position = 1",
        (msgspec.msgpack.encode({"role": "assistant", "tool_calls": [{"oops": 1}]}),),
    )
    db.commit()
    db.close()
    store = open_store(path)
    try:
        runtime = AgentRuntime(name="lone")
        register_transcripts(runtime, "lab-tools", store=store)
        quarantined = store._db.execute("SELECT COUNT(*) FROM quarantine").fetchone()[0]
        assert quarantined >= 1
    finally:
        store.close()
