"""Calling tools: ``RemoteTool`` (``remote_tool``) for a tool served on the bus, and ``ToolSet``.

A remote tool is named ``SERVER__TOOL`` to the model (``camera__describe_view``), so
tools of different servers never clash. A call is an ask on ``tools.SERVER.call``
with a timeout. Every way a call can fail (the tool raised, its arguments were
invalid, no reply in time, the server's process is gone, the runtime is closing)
becomes a result text ``{"error": ...}`` the model reads; the caller never crashes.
A call the caller gives up (timeout, cancellation) is cancelled at the server too.
Given ``on_chunk``, a call is an ``ask_stream``: a streaming tool's chunks reach
``on_chunk`` as the tool yields them, and a call that fails after some chunks keeps
them in its error result (``"partial"``).

``ToolSet`` is what a ``ToolAgent`` calls: local ``Tool`` s under their own names and
remote tools under namespaced names, with the catalogs of whole servers discovered
over the bus (``ToolSet.discover``).
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterable, Mapping
from typing import Any

import msgspec

from xrmq.actors.models import ToolCall, ToolSpec
from xrmq.actors.runtime import AskError, ReplyOverflow, RuntimeClosedError, get_logger
from xrmq.schemas.tools import (
    ToolCallReply,
    ToolCallRequest,
    ToolCancel,
    ToolCatalog,
    ToolListRequest,
)

from .server import ToolTopics, check_server_name
from .tool import OnChunk, Tool, args_schema, deliver, failed

NAMESPACE_SEP = "__"

DEFAULT_TIMEOUT_S = 10.0


def namespaced(server: str, tool: str) -> str:
    """The model-facing name of ``tool`` served by ``server``."""
    return f"{server}{NAMESPACE_SEP}{tool}"


class RemoteTool:
    """A tool served by tool server ``server`` as ``name``; see the module docstring."""

    def __init__(
        self,
        server: str,
        name: str,
        *,
        description: str,
        parameters: Mapping[str, Any] | None = None,
        timeout_s: float = DEFAULT_TIMEOUT_S,
    ) -> None:
        check_server_name(server, "remote_tool.server")
        if not timeout_s > 0:
            raise ValueError("remote_tool.timeout_s: must be positive")
        self.server = server
        self.name = name
        self.topics = ToolTopics.of(server)
        self.timeout_s = timeout_s
        schema = {"type": "object", "properties": {}} if parameters is None else dict(parameters)
        self._spec = ToolSpec(namespaced(server, name), description, schema)

    def __repr__(self) -> str:
        return f"RemoteTool({self._spec.name!r})"

    def spec(self) -> ToolSpec:
        return self._spec

    async def call(
        self,
        runtime: Any,
        arguments: str,
        *,
        call_id: str,
        participant_id: str | None = None,
        on_chunk: OnChunk | None = None,
    ) -> ToolCallReply:
        """Ask the server to run the call; any failure is an error reply. With
        ``on_chunk``, a streaming tool's chunks are handed to it as they arrive."""
        parts: list[str] = []
        try:
            if on_chunk is None:
                return await runtime.ask(
                    self.topics.call,
                    ToolCallRequest(call_id, self.name, arguments),
                    reply_type=ToolCallReply,
                    participant_id=participant_id,
                    timeout=self.timeout_s,
                )
            request = ToolCallRequest(call_id, self.name, arguments, stream=True)
            async with runtime.ask_stream(
                self.topics.call,
                request,
                reply_type=ToolCallReply,
                participant_id=participant_id,
                timeout=self.timeout_s,
            ) as replies:
                async for reply in replies:
                    if not reply.partial:
                        return reply
                    parts.append(reply.content)
                    await deliver(on_chunk, reply.content)
            raise RuntimeClosedError("the reply stream ended without a result")
        except TimeoutError:
            self._cancel(runtime, call_id, participant_id)
            return failed(
                f"{self._spec.name}: no reply within {self.timeout_s:g} s "
                "(the tool is slow or its process is gone)",
                "".join(parts),
            )
        except asyncio.CancelledError:
            self._cancel(runtime, call_id, participant_id)
            raise
        except AskError as error:
            return failed(f"{self._spec.name}: {error}", "".join(parts))
        except (
            RuntimeClosedError,
            ReplyOverflow,
            msgspec.ValidationError,
            msgspec.DecodeError,
        ) as error:
            return failed(f"{self._spec.name}: {type(error).__name__}: {error}", "".join(parts))

    def _cancel(self, runtime: Any, call_id: str, participant_id: str | None) -> None:
        if getattr(runtime, "running", False):
            runtime.send(self.topics.cancel, ToolCancel(call_id), participant_id=participant_id)


def remote_tool(
    server: str,
    name: str,
    *,
    description: str,
    args: type[msgspec.Struct] | None = None,
    timeout_s: float = DEFAULT_TIMEOUT_S,
) -> RemoteTool:
    """A tool of tool server ``server``, described locally (``args`` gives its schema)."""
    return RemoteTool(
        server,
        name,
        description=description,
        parameters=None if args is None else args_schema(args),
        timeout_s=timeout_s,
    )


class ToolSet:
    """The tools one agent may call: local ``Tool`` s and ``RemoteTool`` s, by model-facing name."""

    def __init__(self, tools: Iterable[Tool | RemoteTool] = ()) -> None:
        self._tools: dict[str, Tool | RemoteTool] = {}
        for tool in tools:
            self.add(tool)

    def add(self, tool: Tool | RemoteTool) -> None:
        """Add a tool; ``ValueError`` for a duplicate model-facing name."""
        if not isinstance(tool, Tool | RemoteTool):
            raise ValueError("ToolSet: every tool must be a Tool or a RemoteTool")
        name = tool.spec().name
        if name in self._tools:
            raise ValueError(f"ToolSet: two tools are named {name!r}")
        self._tools[name] = tool

    def __contains__(self, name: object) -> bool:
        return name in self._tools

    def __len__(self) -> int:
        return len(self._tools)

    def specs(self) -> tuple[ToolSpec, ...]:
        """What the model is offered."""
        return tuple(tool.spec() for tool in self._tools.values())

    async def call(
        self,
        runtime: Any,
        call: ToolCall,
        *,
        participant_id: str | None = None,
        on_chunk: OnChunk | None = None,
    ) -> ToolCallReply:
        """Run one of the model's calls; an unknown name is an error reply. A streaming
        tool's chunks go to ``on_chunk`` as they come."""
        tool = self._tools.get(call.name)
        if tool is None:
            names = ", ".join(self._tools) or "none"
            return failed(f"no tool named {call.name!r}; the tools are {names}")
        if isinstance(tool, Tool):
            return await tool.invoke(call.arguments, on_chunk)
        return await tool.call(
            runtime,
            call.arguments,
            call_id=call.id,
            participant_id=participant_id,
            on_chunk=on_chunk,
        )

    @staticmethod
    async def discover(
        runtime: Any,
        server: str,
        *,
        timeout_s: float = DEFAULT_TIMEOUT_S,
        call_timeout_s: float = DEFAULT_TIMEOUT_S,
    ) -> list[RemoteTool]:
        """The remote tools tool server ``server`` serves, from its catalog (an ask
        bounded by ``timeout_s``); their calls time out after ``call_timeout_s``."""
        topics = ToolTopics.of(server)
        catalog = await runtime.ask(
            topics.list, ToolListRequest(), reply_type=ToolCatalog, timeout=timeout_s
        )
        get_logger().debug(
            "tools.discovered", server=server, tools=[info.name for info in catalog.tools]
        )
        return [
            RemoteTool(
                server,
                info.name,
                description=info.description,
                parameters=info.parameters,
                timeout_s=call_timeout_s,
            )
            for info in catalog.tools
        ]
