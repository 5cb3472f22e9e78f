"""``/compact toolcall|summary [DESTINATION]``: a manual compaction of one participant's
transcript at a tools destination, asked over the bus (``CompactRequest`` on the
destination's compact topic).

``xrmq chat`` runs it for its ``/compact`` line and ``xrmq context compact --tier``
(``context_commands``) for one shot; both print the line it returns.
"""

from __future__ import annotations

from collections.abc import Sequence

from xrmq.actors.runtime import AgentRuntime, AskError
from xrmq.actors.tools.control import compact_topic
from xrmq.schemas.tools import CompactReply, CompactRequest

from .boxinfo import tools_destination_of


async def compact(
    runtime: AgentRuntime,
    participant_id: str,
    line: str,
    last: str | None,
    *,
    timeout: float = 10.0,
    tools: Sequence[str] | None = None,
) -> str:
    """Run ``/compact toolcall|summary [DESTINATION]``; the line to print.

    With the running box's tools destinations (``tools``, from its ``BoxInfo``; None:
    unknown), a destination that is not one of them is refused at once (it would never
    answer), and with none named the last to answer, else the box's only one, is taken.
    """
    words = line.split()[1:]
    tier = "toolcall" if words[:1] == ["toolcall"] else "summary"
    words = words[1:] if words[:1] in (["toolcall"], ["summary"]) else words
    named = words[0] if words else None
    if tools is None and named is None and last is None:
        return (
            "xrmq chat: /compact: no destination answered yet; "
            "name one: /compact toolcall|summary DESTINATION"
        )
    try:
        destination = tools_destination_of(named, last, tools, "the box's")
    except ValueError as error:
        return f"xrmq chat: /compact: {error}"
    try:
        reply = await runtime.ask(
            compact_topic(destination),
            CompactRequest(tier),
            reply_type=CompactReply,
            participant_id=participant_id,
            timeout=timeout,
        )
    except TimeoutError:
        return (
            f"xrmq chat: /compact: {destination!r} is not a tools destination "
            f"(no answer within {timeout:g} s)"
        )
    except AskError as error:
        return f"xrmq chat: /compact: {error}"
    if tier == "toolcall":
        share = f"{reply.reclaimed_fraction:.0%}"
        return (
            f"xrmq chat: compacted tool results at {destination}: "
            f"{reply.reclaimed_count} reclaimed ({share} of the transcript)"
        )
    fraction = f"{reply.reclaimed_fraction:.0%}"
    return f"xrmq chat: summary at {destination}: {reply.status} ({fraction} reclaimed)"
