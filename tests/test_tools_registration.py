"""``Agent(tools=...)``: an agent declaring tools serves them on the bus when it is
registered, as ``serve_tools`` does; another runtime calls them by namespaced name."""

from __future__ import annotations

import msgspec
import pytest

from xrmq.actors.models import ToolCall
from xrmq.actors.runtime import Agent, AgentRuntime, RuntimeContext, subscribe
from xrmq.actors.tools.client import ToolSet, remote_tool
from xrmq.actors.tools.server import ToolServer
from xrmq.actors.tools.tool import Tool
from xrmq.schemas import ConversationContextUpdate
from xrmq.topics import Topic

SCENE = Topic("test.scene", ConversationContextUpdate)


class View(msgspec.Struct):
    pass


class Camera(Agent):
    """Its tool answers from the agent's own state, which a subscription keeps current."""

    def __init__(self, **kwargs) -> None:
        self.scene = "an empty bench"
        super().__init__(
            tools=[Tool("describe_view", "Describe the bench.", View, self.describe)], **kwargs
        )

    def describe(self, args: View) -> str:
        return f"The camera sees {self.scene}."

    @subscribe(SCENE)
    async def on_scene(self, message: ConversationContextUpdate, ctx: RuntimeContext) -> None:
        self.scene = message.text


async def test_an_agent_declaring_tools_serves_them_on_the_bus_under_its_name() -> None:
    box = AgentRuntime(name="camera-box")
    camera = box.register("camera", Camera())
    caller = AgentRuntime(box.address, name="caller")
    async with box, caller:
        assert isinstance(box.agent("tools.camera"), ToolServer)
        discovered = await ToolSet.discover(caller, "camera")
        assert [tool.spec().name for tool in discovered] == ["camera__describe_view"]
        tools = ToolSet(discovered)
        first = await tools.call(caller, ToolCall("c1", "camera__describe_view", "{}"))
        # An ask, so the scene is handled before the next call (the reply is None).
        await caller.ask(SCENE, ConversationContextUpdate("a red multimeter"), timeout=5)
        second = await remote_tool("camera", "describe_view", description="d").call(
            caller, "{}", call_id="c2"
        )
    assert camera.tools[0].name == "describe_view"
    assert first.content == "The camera sees an empty bench." and first.error is None
    assert second.content == "The camera sees a red multimeter."


async def test_tool_server_names_the_server_and_an_agent_without_tools_serves_none() -> None:
    box = AgentRuntime(name="box")
    box.register("camera.front", Camera(tool_server="front-cam"))

    class Plain(Agent):
        pass

    box.register("plain", Plain())
    caller = AgentRuntime(box.address, name="caller")
    async with box, caller:
        reply = await remote_tool("front-cam", "describe_view", description="d").call(
            caller, "{}", call_id="c1"
        )
        with pytest.raises(KeyError):
            box.agent("tools.plain")
    assert reply.content == "The camera sees an empty bench."


def test_bad_tool_declarations_and_unusable_server_names_are_refused_naming_the_rule() -> None:
    tool = Tool("describe_view", "Describe the bench.", View, lambda args: "x")
    with pytest.raises(ValueError, match=r"^Agent.tools: tool names must be unique$"):
        Agent(tools=[tool, tool])
    with pytest.raises(ValueError, match=r"^Agent.tools: every tool must be a Tool$"):
        Agent(tools=["describe_view"])
    runtime = AgentRuntime(name="box")
    with pytest.raises(
        ValueError,
        match=(
            r"^register: 'camera.front' serves tools as tool server 'camera.front': "
            r"ToolServer.server: must be 1-40 letters, digits or '-'.*Agent\(tool_server=...\)$"
        ),
    ):
        runtime.register("camera.front", Camera())
    runtime.register("camera.front", Camera(tool_server="front"))  # nothing was registered before
    with pytest.raises(ValueError, match=r"^register: name 'tools.front' is already registered$"):
        runtime.register("other", Camera(tool_server="front"))
