"""A conversation's messages as a UI shows them, and as a standalone HTML page.

``history_entry`` flattens one OpenAI chat message into a ``HistoryEntry`` (its text,
image URLs, reasoning, tool calls, the call a tool result answers).
``render_history_as_html`` writes a page of them: every text escaped, images shown
only from ``data:image/`` and ``http(s)`` URLs, and reasoning, tool calls and tool
results folded in ``<details>`` so the dialogue reads first.
"""

from __future__ import annotations

import html
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from xrmq.schemas._validation import IMAGE_URL_PREFIXES


@dataclass(frozen=True, slots=True)
class HistoryEntry:
    """One message for display."""

    role: str
    text: str
    images: tuple[str, ...] = ()
    reasoning: str | None = None
    tool_calls: tuple[tuple[str, str, str], ...] = ()
    """(call id, tool name, argument string) for each call an assistant message asks for."""
    tool_call_id: str | None = None


def history_entry(message: Mapping[str, Any]) -> HistoryEntry:
    """``message`` (an OpenAI chat message) for display."""
    content = message.get("content")
    texts: list[str] = []
    images: list[str] = []
    if isinstance(content, str):
        texts.append(content)
    for block in content if isinstance(content, list) else ():
        if block.get("type") == "text":
            texts.append(str(block.get("text", "")))
        elif block.get("type") == "image_url":
            url = block.get("image_url")
            images.append(str(url.get("url", "") if isinstance(url, Mapping) else url))
    calls = tuple(
        (str(c.get("id", "")), str(c["function"]["name"]), str(c["function"].get("arguments", "")))
        for c in message.get("tool_calls") or ()
    )
    reasoning = message.get("reasoning_content") or message.get("reasoning")
    return HistoryEntry(
        str(message.get("role", "")),
        "\n\n".join(texts),
        tuple(images),
        str(reasoning) if reasoning else None,
        calls,
        message.get("tool_call_id"),
    )


def content_to_html(entry: HistoryEntry) -> str:
    """One entry's body as HTML (escaped text, images, folded reasoning and tool calls)."""
    parts: list[str] = []
    if entry.reasoning:
        parts.append(_folded("reasoning", "reasoning", entry.reasoning))
    if entry.role == "tool":
        summary = f"tool result ({entry.tool_call_id})"
        parts.append(_folded("tool-result", summary, entry.text))
    elif entry.text:
        parts.append(f'<div class="text">{html.escape(entry.text)}</div>')
    for url in entry.images:
        if url.startswith(IMAGE_URL_PREFIXES):  # never javascript: or file:
            parts.append(f'<img class="image" alt="image" src="{html.escape(url, quote=True)}">')
        else:
            parts.append('<div class="image">[image with an unsupported URL]</div>')
    for call_id, name, arguments in entry.tool_calls:
        parts.append(_folded("tool-call", f"tool call: {name} ({call_id})", arguments))
    return "\n".join(parts)


def render_history_as_html(history: Sequence[HistoryEntry], title: str = "Conversation") -> str:
    """A standalone HTML page of ``history``."""
    sections = "\n".join(
        f'<section class="message {html.escape(entry.role, quote=True)}">'
        f'<h2 class="role">{html.escape(entry.role)}</h2>\n{content_to_html(entry)}</section>'
        for entry in history
    )
    return (
        "<!DOCTYPE html>\n"
        '<html><head><meta charset="utf-8">'
        f"<title>{html.escape(title)}</title>\n<style>{_STYLE}</style></head>\n"
        f"<body><h1>{html.escape(title)}</h1>\n{sections}\n</body></html>\n"
    )


def _folded(kind: str, summary: str, body: str) -> str:
    return (
        f'<details class="{kind}"><summary>{html.escape(summary)}</summary>'
        f"<pre>{html.escape(body)}</pre></details>"
    )


_STYLE = (
    "body{font-family:sans-serif;max-width:50em;margin:auto}"
    ".message{border-top:1px solid #ccc;padding:.5em 0}"
    ".role{font-size:.8em;color:#666;text-transform:uppercase;margin:0}"
    ".text,pre{white-space:pre-wrap}"
    ".image{max-width:100%}"
)
