"""Streamed tool results: an async-generator tool's chunks reach the caller as the tool
yields them (locally, over the bus through ``ask_stream``, and from another OS
process into a ``ToolAgent``'s ``on_tool_chunk``), before the tool finishes; the model
and the transcript get the whole result, or the chunks as ``"partial"`` of an error."""

from __future__ import annotations

import asyncio
import json

import msgspec
import pytest
from tools_doubles import plain

from xrmq.actors.models import ScriptedLLM, ScriptedResponse, ToolCall
from xrmq.actors.runtime import (
    DEFERRED_REPLY,
    Agent,
    AgentRuntime,
    AskError,
    ReplyOverflow,
    RuntimeContext,
    subscribe,
)
from xrmq.actors.tools import ToolAgent
from xrmq.actors.tools.client import remote_tool
from xrmq.actors.tools.server import serve_tools
from xrmq.actors.tools.tool import Tool
from xrmq.schemas import AgentTurn, ConversationContextUpdate
from xrmq.topics import VOICE_OUTPUT_TOPIC, Topic

from buses import broker_process, expect_line, python, reap
from router_doubles import FakeContext


async def never_started() -> None:
    return None


class Room(msgspec.Struct):
    name: str = "lab"


def gated(release: asyncio.Event, fail: bool = False):
    """A streaming tool that yields one chunk, waits for ``release``, then ends."""

    async def scan(args: Room):
        yield f"{args.name}: door closed; "
        await release.wait()
        if fail:
            raise RuntimeError("scanner unplugged")
        yield {"lights": "on"}

    return scan


async def test_a_local_generator_tools_chunks_reach_on_chunk_before_it_finishes() -> None:
    release, seen = asyncio.Event(), []

    def on_chunk(chunk: str) -> None:
        seen.append(chunk)
        release.set()  # only a chunk seen while the tool waits lets it finish

    tool = Tool("scan", "Scan a room.", Room, gated(release))
    reply = await asyncio.wait_for(tool.invoke('{"name": "lab 3"}', on_chunk), 10)
    assert seen == ["lab 3: door closed; ", '{"lights":"on"}']
    assert reply.content == 'lab 3: door closed; {"lights":"on"}' and reply.error is None
    release_now = asyncio.Event()
    release_now.set()
    broken = await Tool("scan", "Scan.", Room, gated(release_now, fail=True)).invoke("{}")
    assert json.loads(broken.content) == {
        "error": "scan failed: RuntimeError: scanner unplugged",
        "partial": "lab: door closed; ",
    }


async def test_over_the_bus_chunks_arrive_while_the_servers_generator_still_runs() -> None:
    release = asyncio.Event()
    server = AgentRuntime(name="scanner")
    serve_tools(server, "rooms", [Tool("scan", "Scan a room.", Room, gated(release))])
    caller = AgentRuntime(server.address, name="caller")
    async with server, caller:
        scan = remote_tool("rooms", "scan", description="Scan a room.", timeout_s=10)
        seen: list[str] = []
        first = asyncio.Event()

        async def on_chunk(chunk: str) -> None:
            seen.append(chunk)
            first.set()

        call = asyncio.create_task(
            scan.call(caller, '{"name": "lab 3"}', call_id="c1", on_chunk=on_chunk)
        )
        await first.wait()
        assert seen == ["lab 3: door closed; "] and not call.done()
        assert server.agent("tools.rooms").gauges()["tool_calls_running"] == 1
        release.set()
        streamed = await call
        release.clear()
        plain = asyncio.create_task(scan.call(caller, "{}", call_id="c2"))
        release.set()
        joined = await plain  # no on_chunk: one reply, the whole result
    assert seen == ["lab 3: door closed; ", '{"lights":"on"}']
    assert streamed.content == 'lab 3: door closed; {"lights":"on"}' and not streamed.partial
    assert joined.content == 'lab: door closed; {"lights":"on"}'


async def test_a_stream_that_times_out_keeps_its_chunks_as_partial_and_is_cancelled_at_the_server():
    server = AgentRuntime(name="scanner")
    tools = serve_tools(
        server, "rooms", [Tool("scan", "Scan a room.", Room, gated(asyncio.Event()))]
    )
    caller = AgentRuntime(server.address, name="caller")
    async with server, caller:
        seen: list[str] = []
        scan = remote_tool("rooms", "scan", description="Scan a room.", timeout_s=0.5)
        reply = await scan.call(caller, "{}", call_id="c1", on_chunk=seen.append)
        while tools.cancelled == 0:  # the cancel reaches the server's task
            await caller.ask(tools.topics.list, tools.topics.list.message_type(), timeout=5)
    assert seen == ["lab: door closed; "]
    body = json.loads(reply.content)
    assert body["partial"] == "lab: door closed; " and "no reply within 0.5 s" in body["error"]


class Parts(Agent):
    """Answers each ask in ``count`` replies (``DEFERRED_REPLY``), or with an error."""

    TOPIC = Topic("test.parts", ConversationContextUpdate)

    @subscribe(TOPIC)
    async def on_parts(self, message: ConversationContextUpdate, ctx: RuntimeContext) -> object:
        if message.text == "fail":
            raise ValueError("no parts today")
        for index in range(int(message.text)):
            ctx.runtime.reply(ctx.metadata, index)
        return DEFERRED_REPLY


async def test_ask_stream_yields_every_reply_bounds_its_buffer_and_raises_errors() -> None:
    server = AgentRuntime(name="parts")
    server.register("parts", Parts())
    caller = AgentRuntime(server.address, name="caller")
    async with server, caller:
        got = []
        async with caller.ask_stream(
            Parts.TOPIC, ConversationContextUpdate("3"), reply_type=int, timeout=5
        ) as replies:
            async for reply in replies:
                got.append(reply)
                if reply == 2:
                    break
        with pytest.raises(AskError, match="no parts today"):
            async with caller.ask_stream(
                Parts.TOPIC, ConversationContextUpdate("fail"), timeout=5
            ) as replies:
                await anext(replies)
        overflowing = caller.ask_stream(
            Parts.TOPIC, ConversationContextUpdate("5"), reply_type=int, timeout=5, max_buffered=2
        )
        # The replier outruns its reader: nothing is read until a later ask of the same
        # actor is answered, which is after all five replies (one mailbox, one path through
        # the broker). A reader that keeps pace never overflows, so reading while they
        # arrive would make the overflow depend on how the replies were batched.
        after = ConversationContextUpdate("1")
        assert await caller.ask(Parts.TOPIC, after, reply_type=int, timeout=5) == 0
        assert [await anext(overflowing), await anext(overflowing)] == [0, 1]  # the buffer
        with pytest.raises(ReplyOverflow):
            await anext(overflowing)
        with pytest.raises(TimeoutError):
            async with caller.ask_stream(
                Parts.TOPIC, ConversationContextUpdate("0"), timeout=0.2
            ) as replies:
                await anext(replies)
        assert caller.metrics().tables["asks_in_flight"] == 0  # every stream let go of its entry
    assert got == [0, 1, 2]


@pytest.mark.timeout(120)
async def test_a_tool_agent_sees_a_streaming_tool_in_another_process_chunk_by_chunk() -> None:
    """The other process's ``trend`` yields a chunk, then waits for ``release``: only
    the agent's ``on_tool_chunk`` having seen that chunk (and calling ``release``) lets
    it finish; the model then gets the whole result, and so does the transcript."""
    llm = ScriptedLLM(
        ScriptedResponse(tool_calls=(ToolCall("c1", "lab__trend", "{}"),)),
        "The kettle went from 80 to 85 degrees.",
    )
    with broker_process() as bus:
        server = python("tool_server.py", bus)
        try:
            expect_line(server, "ready")
            runtime = AgentRuntime(bus, name="tool-caller")
            async with runtime:
                release = remote_tool("lab", "release", description="Let the trend finish.")
                chunks: list[tuple[str, str, str]] = []

                async def on_tool_chunk(participant: str, call: ToolCall, chunk: str) -> None:
                    chunks.append((participant, call.id, chunk))
                    if len(chunks) == 1:
                        done = await release.call(
                            runtime, "{}", call_id="r1", participant_id=participant
                        )
                        assert done.content == "released"

                agent = ToolAgent(
                    llm,
                    context=FakeContext(),
                    runtime=runtime,
                    output_topic=VOICE_OUTPUT_TOPIC,
                    servers=["lab"],
                    discovery_timeout_s=10,
                    tool_timeout_s=20,
                    on_tool_chunk=on_tool_chunk,
                )
                result = await agent.answer(
                    AgentTurn("p1", "t1", "How did the kettle trend?"), started=never_started
                )
        finally:
            reap(server)
    assert chunks == [("p1", "c1", "kettle: 80 C, "), ("p1", "c1", "then 85 C")]
    assert result.response == "The kettle went from 80 to 85 degrees."
    tool_result = next(m for m in llm.requests[1].messages if m.role == "tool")
    assert tool_result.content == "kettle: 80 C, then 85 C"
    assert [
        m["content"] for m in plain(agent.transcript("p1").messages) if m["role"] == "tool"
    ] == ["kettle: 80 C, then 85 C"]
