"""Tool calls on the bus: wire types only.

A tool server NAME answers asks on ``tools.NAME.list`` (``ToolListRequest`` ->
``ToolCatalog``) and ``tools.NAME.call`` (``ToolCallRequest`` -> ``ToolCallReply``) and
takes ``ToolCancel`` on ``tools.NAME.cancel``. Arguments and results are text: the
model writes arguments as a JSON object and reads results as text, so the bus carries
them verbatim. A call asked with ``stream`` set (``AgentRuntime.ask_stream``) of a
streaming tool is answered in parts: one ``partial`` reply per chunk as the tool yields
it, then the final reply with the whole result.
"""

from __future__ import annotations

from typing import Any

import msgspec

from ._validation import require, require_name


class ToolInfo(msgspec.Struct, frozen=True):
    """One served tool as a model sees it: name, description, JSON Schema of its arguments."""

    name: str
    description: str
    parameters: dict[str, Any]

    def __post_init__(self) -> None:
        require_name(self.name, "ToolInfo", "name")


class ToolListRequest(msgspec.Struct, frozen=True):
    """Ask a tool server for its catalog."""


class ToolCatalog(msgspec.Struct, frozen=True):
    """The tools a server serves."""

    tools: tuple[ToolInfo, ...] = ()


class ToolCallRequest(msgspec.Struct, frozen=True):
    """Call tool ``name`` with ``arguments`` (a JSON object as text)."""

    call_id: str
    """The caller's id for the call (the model's tool-call id); ``ToolCancel`` names it."""
    name: str
    arguments: str = "{}"
    stream: bool = False
    """Reply with each chunk of a streaming tool as it comes (``partial`` replies)."""

    def __post_init__(self) -> None:
        require_name(self.call_id, "ToolCallRequest", "call_id")
        require_name(self.name, "ToolCallRequest", "name")


class ToolCallReply(msgspec.Struct, frozen=True):
    """A tool's result as text; on failure ``error`` says why and ``content`` is the
    ``{"error": ...}`` text the model sees."""

    content: str
    error: str | None = None
    partial: bool = False
    """One chunk of a streamed result; the final reply (not partial) has the whole result."""


class ToolCancel(msgspec.Struct, frozen=True):
    """Stop the running call ``call_id`` (its caller gave up: barge-in or timeout)."""

    call_id: str

    def __post_init__(self) -> None:
        require(bool(self.call_id), "ToolCancel", "call_id", "must be a non-empty string")


class CompactRequest(msgspec.Struct, frozen=True):
    """Compact the envelope's participant's transcript by hand: tier ``toolcall`` or ``summary``."""

    tier: str = "summary"

    def __post_init__(self) -> None:
        require(
            self.tier in ("toolcall", "summary"),
            "CompactRequest",
            "tier",
            "must be 'toolcall' or 'summary'",
        )


class CompactReply(msgspec.Struct, frozen=True):
    """What a manual compaction did: ``status`` is ``compacted``, ``nothing_to_condense`` or
    ``summarize_failed``; ``reclaimed_count`` counts tool results (tier ``toolcall``)."""

    tier: str
    status: str
    reclaimed_fraction: float = 0.0
    reclaimed_count: int = 0


TRANSCRIPT_EDITS = ("retry", "revise", "render")


class TranscriptEdit(msgspec.Struct, frozen=True):
    """Act on the envelope's participant's transcript at a tools destination: ``retry`` and
    ``revise`` drop the last question and all that answered it (the chat asks again);
    ``render`` reads the transcript."""

    action: str

    def __post_init__(self) -> None:
        require(
            self.action in TRANSCRIPT_EDITS,
            "TranscriptEdit",
            "action",
            "must be 'retry', 'revise' or 'render'",
        )


class TranscriptEditReply(msgspec.Struct, frozen=True):
    """What an edit did: ``question`` is the question dropped (empty: there was none),
    ``dropped`` the messages dropped; ``conversation`` is the transcript as
    ``Conversation.dumps`` writes it (``render``)."""

    action: str
    question: str = ""
    dropped: int = 0
    conversation: str = ""
    images: tuple[str, ...] = ()
    """The dropped question's images (``retry`` asks with them again)."""
