"""``Tool``: a typed function a model can call, and how one call turns into result text.

``Tool(name, description, args, fn)``: ``args`` is a ``msgspec.Struct`` type whose JSON
Schema (from msgspec) is what the model sees; ``fn(args)`` may be a plain function, a
coroutine function, or an async generator whose chunks are the streamed result: each
chunk goes to the caller's ``on_chunk`` as the tool yields it, and the result text is
the chunks joined. A result (or chunk) that is not text is JSON-encoded.

``invoke`` never raises for the tool's own failures: bad arguments and exceptions become
``{"error": ...}`` result text, which the model reads like any result (with the chunks
streamed before the failure as ``"partial"``). Cancellation propagates (a barge-in
stops the call).
"""

from __future__ import annotations

import inspect
from collections.abc import Awaitable, Callable
from typing import Any

import msgspec

from xrmq.actors.models import ToolSpec
from xrmq.actors.models.types import TOOL_NAME
from xrmq.schemas.tools import ToolCallReply

OnChunk = Callable[[str], Awaitable[None] | None]
"""Called with each chunk of a streamed result as it comes (sync or async)."""


def error_result(reason: str, partial: str = "") -> str:
    """The result text of a failed call: ``{"error": reason}`` (and ``"partial"``: what
    streamed before the failure)."""
    body = {"error": reason, "partial": partial} if partial else {"error": reason}
    return msgspec.json.encode(body).decode()


def failed(reason: str, partial: str = "") -> ToolCallReply:
    """A failed call's reply: the reason, and the ``{"error": ...}`` text the model sees."""
    return ToolCallReply(error_result(reason, partial), error=reason)


async def deliver(on_chunk: OnChunk | None, chunk: str) -> None:
    """Hand ``chunk`` to ``on_chunk`` (if any), awaiting it when it is a coroutine function."""
    if on_chunk is not None:
        done = on_chunk(chunk)
        if inspect.isawaitable(done):
            await done


def result_text(value: Any) -> str:
    """A tool's return value as result text: text as is, anything else as JSON."""
    if isinstance(value, str):
        return value
    return msgspec.json.encode(value).decode()


def args_schema(args: type[msgspec.Struct]) -> dict[str, Any]:
    """The JSON Schema of ``args`` as an inline object schema (nested types under ``$defs``)."""
    (ref,), defs = msgspec.json.schema_components((args,), ref_template="#/$defs/{name}")
    name = ref["$ref"].rsplit("/", 1)[-1]
    schema = dict(defs.pop(name))
    schema.setdefault("properties", {})
    if defs:
        schema["$defs"] = defs
    return schema


class Tool:
    """A named, described, typed function; see the module docstring.

    Raises ``ValueError`` naming the field for a name providers reject (1-64 letters,
    digits, ``_`` or ``-``), an empty description, an ``args`` that is not a Struct type
    or an ``fn`` that is not callable.
    """

    def __init__(
        self, name: str, description: str, args: type[msgspec.Struct], fn: Callable[[Any], Any]
    ) -> None:
        if not (isinstance(name, str) and TOOL_NAME.fullmatch(name)):
            raise ValueError("Tool.name: must be 1-64 letters, digits, '_' or '-'")
        if not (isinstance(description, str) and description.strip()):
            raise ValueError("Tool.description: must be non-empty text")
        if not (isinstance(args, type) and issubclass(args, msgspec.Struct)):
            raise ValueError("Tool.args: must be a msgspec.Struct type")
        if not callable(fn):
            raise ValueError("Tool.fn: must be callable")
        self.name = name
        self.description = description
        self.args = args
        self.fn = fn
        self.parameters = args_schema(args)
        self._decoder = msgspec.json.Decoder(args)

    def __repr__(self) -> str:
        return f"Tool({self.name!r})"

    def spec(self, name: str | None = None) -> ToolSpec:
        """What the model sees, optionally under another (namespaced) ``name``."""
        return ToolSpec(name or self.name, self.description, self.parameters)

    @property
    def streams(self) -> bool:
        """Whether ``fn`` is an async generator (its result comes in chunks)."""
        return inspect.isasyncgenfunction(self.fn)

    async def invoke(self, arguments: str, on_chunk: OnChunk | None = None) -> ToolCallReply:
        """Run one call with ``arguments`` (JSON object text): the result, or the failure.

        A streaming tool's chunks go to ``on_chunk`` as they come, before the call ends.
        """
        try:
            parsed = self._decoder.decode(arguments or "{}")
        except (msgspec.DecodeError, msgspec.ValidationError, ValueError) as error:
            return failed(f"invalid arguments for {self.name}: {error}")
        parts: list[str] = []
        try:
            if self.streams:
                async for chunk in self.fn(parsed):
                    text = result_text(chunk)
                    parts.append(text)
                    await deliver(on_chunk, text)
                return ToolCallReply("".join(parts))
            value = self.fn(parsed)
            if inspect.isawaitable(value):
                value = await value
            return ToolCallReply(result_text(value))
        except Exception as error:  # the model sees the failure; the caller never crashes
            return failed(f"{self.name} failed: {type(error).__name__}: {error}", "".join(parts))
