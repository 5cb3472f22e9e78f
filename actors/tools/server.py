"""Serving tools on the bus: ``ToolServer`` and ``serve_tools`` (or ``Agent(tools=...)``).

A tool server NAME answers ``tools.NAME.list`` with its catalog and runs each
``tools.NAME.call`` as a task of its own, replying to the ask when the call ends
(``DEFERRED_REPLY``), so a slow call never holds up the next one and calls from one
model response run in parallel. A call asked with ``stream`` of a streaming tool gets a
``partial`` reply per chunk as the tool yields it, then the final one (the whole
result). ``tools.NAME.cancel`` cancels a running call (its
caller gave up: a barge-in or a timeout). At most ``max_running`` calls run at once;
a call beyond that is refused with an error result, never queued without bound.

``Agent(tools=...)`` is served through the kernel's extension points: importing this
module installs ``check_tools`` (``set_tools_check``) and ``serve_declared_tools``
(``add_register_hook``), so ``AgentRuntime.register`` serves an agent's tools without
the runtime importing the tools package (a ``Tool`` cannot exist before it is imported).
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from dataclasses import dataclass

from xrmq.actors.runtime import (
    DEFERRED_REPLY,
    Agent,
    AgentRuntime,
    Handlers,
    RuntimeContext,
    get_logger,
)
from xrmq.actors.runtime.agent import add_register_hook, set_tools_check
from xrmq.schemas import MessageMetadata
from xrmq.schemas._validation import check_positive
from xrmq.schemas.tools import (
    ToolCallReply,
    ToolCallRequest,
    ToolCancel,
    ToolCatalog,
    ToolInfo,
    ToolListRequest,
)
from xrmq.topics import Topic

from .tool import Tool, failed

SERVER_NAME_RULE = "must be 1-40 letters, digits or '-' (it namespaces tool names: NAME__tool)"


def check_server_name(name: str, owner: str) -> None:
    """Raise ``ValueError`` unless ``name`` can namespace tool names."""
    ok = isinstance(name, str) and 0 < len(name) <= 40
    ok = ok and all(c.isalnum() or c == "-" for c in name)
    if not ok:
        raise ValueError(f"{owner}: {SERVER_NAME_RULE}")


@dataclass(frozen=True, slots=True)
class ToolTopics:
    """The topics of tool server ``name``."""

    list: Topic[ToolListRequest]
    call: Topic[ToolCallRequest]
    cancel: Topic[ToolCancel]

    @classmethod
    def of(cls, name: str) -> ToolTopics:
        check_server_name(name, "tool server name")
        prefix = f"tools.{name}."
        return cls(
            Topic(prefix + "list", ToolListRequest),
            Topic(prefix + "call", ToolCallRequest),
            Topic(prefix + "cancel", ToolCancel),
        )


class ToolServer(Agent):
    """Serves ``tools`` as tool server ``server``; see the module docstring."""

    def __init__(self, server: str, tools: Sequence[Tool], *, max_running: int = 64) -> None:
        check_server_name(server, "ToolServer.server")
        if not tools or not all(isinstance(tool, Tool) for tool in tools):
            raise ValueError("ToolServer.tools: must be one or more Tools")
        names = [tool.name for tool in tools]
        if len(set(names)) != len(names):
            raise ValueError("ToolServer.tools: tool names must be unique")
        check_positive(max_running, "ToolServer.max_running")
        self.server = server
        self.topics = ToolTopics.of(server)
        self.served = {tool.name: tool for tool in tools}
        self.max_running = max_running
        self.calls = 0
        self.refused = 0
        self.cancelled = 0
        self._running: dict[str, asyncio.Task[None]] = {}
        self._catalog = ToolCatalog(
            tuple(ToolInfo(t.name, t.description, t.parameters) for t in tools)
        )

    def handlers(self) -> Handlers:
        topics = self.topics
        return {topics.list: self.on_list, topics.call: self.on_call, topics.cancel: self.on_cancel}

    def gauges(self) -> dict[str, float]:
        return {
            "tool_calls": self.calls,
            "tool_calls_running": len(self._running),
            "tool_calls_refused": self.refused,
            "tool_calls_cancelled": self.cancelled,
        }

    async def on_list(self, message: ToolListRequest, ctx: RuntimeContext) -> ToolCatalog:
        return self._catalog

    async def on_call(self, message: ToolCallRequest, ctx: RuntimeContext) -> object:
        tool = self.served.get(message.name)
        if tool is None:
            served = ", ".join(self.served)
            return failed(f"{self.server} has no tool {message.name!r} (it has {served})")
        if len(self._running) >= self.max_running or message.call_id in self._running:
            self.refused += 1
            return failed(f"{self.server} is busy ({len(self._running)} calls running)")
        self.calls += 1
        task = asyncio.create_task(
            self._run(tool, message, ctx.metadata), name=f"xrmq-tool-{message.name}"
        )
        self._running[message.call_id] = task
        return DEFERRED_REPLY

    async def _run(self, tool: Tool, message: ToolCallRequest, metadata: MessageMetadata) -> None:
        def chunk(text: str) -> None:
            runtime = self.runtime
            if runtime is not None and runtime.running:
                runtime.reply(metadata, ToolCallReply(text, partial=True))

        try:
            reply = await tool.invoke(message.arguments, chunk if message.stream else None)
        except asyncio.CancelledError:
            self.cancelled += 1
            raise
        finally:
            if self._running.get(message.call_id) is asyncio.current_task():
                del self._running[message.call_id]
        if reply.error is not None:
            get_logger(actor=self.name, participant=metadata.participant_id).info(
                "tool.failed", tool=message.name, call=message.call_id, error=reply.error
            )
        runtime = self.runtime
        if runtime is not None and runtime.running:
            runtime.reply(metadata, reply)

    async def on_cancel(self, message: ToolCancel, ctx: RuntimeContext) -> None:
        task = self._running.pop(message.call_id, None)
        if task is not None:
            task.cancel()

    async def on_stop(self) -> None:
        tasks = list(self._running.values())
        self._running.clear()
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)


def check_tools(tools: Sequence[Tool], owner: str) -> tuple[Tool, ...]:
    """``tools`` as a tuple; ``ValueError`` naming ``owner`` for a non-Tool or a duplicate name."""
    tools = tuple(tools)
    if not all(isinstance(tool, Tool) for tool in tools):
        raise ValueError(f"{owner}: every tool must be a Tool")
    names = [tool.name for tool in tools]
    if len(set(names)) != len(names):
        raise ValueError(f"{owner}: tool names must be unique")
    return tools


def serve_tools(
    runtime: AgentRuntime, server: str, tools: Sequence[Tool], *, max_running: int = 64
) -> ToolServer:
    """Register a ``ToolServer`` serving ``tools`` as ``server`` (before the runtime starts)."""
    agent = ToolServer(server, tools, max_running=max_running)
    runtime.register(f"tools.{server}", agent)
    return agent


def serve_declared_tools(name: str, agent: Agent) -> list[tuple[str, Agent]]:
    """The ``ToolServer`` serving an ``Agent(tools=...)``'s tools, as a companion registered
    beside it (a register hook); checked before anything is registered, so a bad server
    name leaves the runtime as it was."""
    if not agent.tools:
        return []
    server = agent.tool_server or name
    try:
        tool_server = ToolServer(server, agent.tools)
    except ValueError as error:
        raise ValueError(
            f"register: {name!r} serves tools as tool server {server!r}: "
            f"{error}; name one with Agent(tool_server=...)"
        ) from None
    return [(f"tools.{server}", tool_server)]


set_tools_check(check_tools)
add_register_hook(serve_declared_tools)
