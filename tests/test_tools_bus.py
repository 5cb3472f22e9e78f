"""Tools: typed schemas, sync/async/streamed functions, serving and calling them on the bus."""

from __future__ import annotations

import asyncio
import json

import msgspec
import pytest

from xrmq.actors.models import ToolCall
from xrmq.actors.runtime import AgentRuntime
from xrmq.actors.tools.client import ToolSet, remote_tool
from xrmq.actors.tools.server import serve_tools
from xrmq.actors.tools.tool import Tool


class Where(msgspec.Struct):
    room: str
    floor: int = 1


class Nothing(msgspec.Struct):
    pass


def where_sync(args: Where) -> dict[str, object]:
    return {"room": args.room, "floor": args.floor, "temperature_c": 21.5}


async def where_async(args: Where) -> str:
    await asyncio.sleep(0)
    return f"{args.room} on floor {args.floor}"


async def where_stream(args: Where):
    for part in ("Room ", args.room, ", floor ", str(args.floor)):
        yield part


def broken(args: Nothing) -> str:
    raise RuntimeError("sensor offline")


def test_the_schema_the_model_sees_comes_from_the_args_struct() -> None:
    spec = Tool("where", "Where a room is.", Where, where_sync).spec()
    assert spec.name == "where" and spec.description == "Where a room is."
    assert spec.parameters == {
        "title": "Where",
        "type": "object",
        "properties": {"room": {"type": "string"}, "floor": {"type": "integer", "default": 1}},
        "required": ["room"],
    }
    assert Tool("n", "Nothing.", Nothing, broken).spec().parameters["properties"] == {}


@pytest.mark.parametrize(
    ("name", "description", "args", "fn", "rule"),
    [
        ("bad name", "d", Where, where_sync, r"^Tool.name: must be 1-64 letters"),
        ("ok", " ", Where, where_sync, r"^Tool.description: must be non-empty text$"),
        ("ok", "d", dict, where_sync, r"^Tool.args: must be a msgspec.Struct type$"),
        ("ok", "d", Where, "nope", r"^Tool.fn: must be callable$"),
    ],
)
def test_a_bad_tool_definition_names_the_field(name, description, args, fn, rule) -> None:
    with pytest.raises(ValueError, match=rule):
        Tool(name, description, args, fn)


async def test_sync_async_and_async_generator_functions_give_result_text() -> None:
    arguments = '{"room": "lab 3", "floor": 2}'
    sync = await Tool("w", "d", Where, where_sync).invoke(arguments)
    assert (
        json.loads(sync.content) == {"room": "lab 3", "floor": 2, "temperature_c": 21.5}
        and sync.error is None
    )
    assert (
        await Tool("w", "d", Where, where_async).invoke(arguments)
    ).content == "lab 3 on floor 2"
    assert (
        await Tool("w", "d", Where, where_stream).invoke(arguments)
    ).content == "Room lab 3, floor 2"


async def test_bad_arguments_and_exceptions_become_error_results() -> None:
    bad = await Tool("w", "d", Where, where_sync).invoke('{"floor": "x"}')
    assert bad.error is not None and "invalid arguments for w" in bad.error
    assert json.loads(bad.content) == {"error": bad.error}
    failed = await Tool("b", "d", Nothing, broken).invoke("{}")
    assert json.loads(failed.content) == {"error": "b failed: RuntimeError: sensor offline"}


async def test_tools_served_on_the_bus_are_discovered_and_called_under_namespaced_names() -> None:
    front = AgentRuntime(name="front")
    back = AgentRuntime(front.address, name="back")
    serve_tools(
        back,
        "camera",
        [
            Tool("describe_view", "Describe the view.", Where, where_async),
            Tool("broken", "Always fails.", Nothing, broken),
        ],
    )
    async with front, back:
        tools = ToolSet(await ToolSet.discover(front, "camera", timeout_s=5))
        assert [spec.name for spec in tools.specs()] == ["camera__describe_view", "camera__broken"]
        assert tools.specs()[0].parameters["required"] == ["room"]
        ok = await tools.call(
            front, ToolCall("c1", "camera__describe_view", '{"room": "bench"}'), participant_id="p1"
        )
        assert (ok.content, ok.error) == ("bench on floor 1", None)
        failed = await tools.call(front, ToolCall("c2", "camera__broken", "{}"))
        assert json.loads(failed.content) == {
            "error": "broken failed: RuntimeError: sensor offline"
        }
        unknown = await tools.call(front, ToolCall("c3", "camera__zoom", "{}"))
        assert "no tool named 'camera__zoom'" in json.loads(unknown.content)["error"]


async def test_a_hung_tool_times_out_as_an_error_result_and_is_cancelled_at_its_server() -> None:
    started, cancelled = asyncio.Event(), asyncio.Event()

    async def hang(args: Nothing) -> str:
        started.set()
        try:
            await asyncio.Event().wait()
        finally:
            cancelled.set()
        return "never"

    front = AgentRuntime(name="front")
    back = AgentRuntime(front.address, name="back")
    server = serve_tools(back, "slow", [Tool("hang", "Hangs.", Nothing, hang)])
    tool = remote_tool("slow", "hang", description="Hangs.", timeout_s=0.3)
    async with front, back:
        reply = await ToolSet([tool]).call(front, ToolCall("h1", "slow__hang", "{}"))
        assert started.is_set()
        await asyncio.wait_for(cancelled.wait(), 5)
    assert "no reply within 0.3 s" in json.loads(reply.content)["error"]
    assert server.cancelled == 1


async def test_calls_to_one_server_run_in_parallel() -> None:
    gate, arrived = asyncio.Event(), []

    async def wait_for_all(args: Where) -> str:
        arrived.append(args.room)
        if len(arrived) == 3:
            gate.set()
        await gate.wait()
        return args.room

    front = AgentRuntime(name="front")
    back = AgentRuntime(front.address, name="back")
    serve_tools(back, "rooms", [Tool("visit", "Visit.", Where, wait_for_all)])
    tools = ToolSet([remote_tool("rooms", "visit", description="Visit.", args=Where, timeout_s=5)])
    async with front, back:
        replies = await asyncio.gather(
            *(
                tools.call(front, ToolCall(f"v{i}", "rooms__visit", json.dumps({"room": f"r{i}"})))
                for i in range(3)
            )
        )
    assert [reply.content for reply in replies] == ["r0", "r1", "r2"]


async def test_a_server_refuses_calls_beyond_max_running_with_an_error_result() -> None:
    gate, running = asyncio.Event(), asyncio.Event()

    async def wait(args: Nothing) -> str:
        running.set()
        await gate.wait()
        return "done"

    front = AgentRuntime(name="front")
    back = AgentRuntime(front.address, name="back")
    server = serve_tools(back, "one", [Tool("wait", "Waits.", Nothing, wait)], max_running=1)
    tools = ToolSet([remote_tool("one", "wait", description="Waits.", timeout_s=5)])
    async with front, back:
        first = asyncio.create_task(tools.call(front, ToolCall("a", "one__wait", "{}")))
        await running.wait()  # the first call is running at the server
        refused = await tools.call(front, ToolCall("b", "one__wait", "{}"))
        gate.set()
        assert (await first).content == "done"
    assert json.loads(refused.content) == {"error": "one is busy (1 calls running)"}
    assert server.refused == 1
