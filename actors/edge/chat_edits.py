"""``/retry``, ``/revise TEXT`` and ``/render FILE`` in ``xrmq chat``: edits of the
participant's transcript at a tools destination, asked over the bus (``TranscriptEdit``
on the destination's transcript topic, ``actors/tools/edits.py``).

``/retry`` and ``/revise`` go to the destination that answered last, which must be a
tools destination (the only ones that keep a transcript of their own): it drops the last
question and all that answered it, and the chat asks that question again (with its
images), or ``TEXT`` instead (with the images attached by ``/image`` since).
``/render`` writes the transcript of the last tools destination to answer (else the
box's only one) as a standalone HTML page (``Conversation.render_history_as_html``).
``/image PATH`` attaches an image file (as a data URL) to the next question.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from xrmq.actors.runtime import AgentRuntime, AskError
from xrmq.actors.tools.conversation_images import image_url
from xrmq.actors.tools.conversation_state import Conversation
from xrmq.actors.tools.edits import edit_topic
from xrmq.schemas.tools import TranscriptEdit, TranscriptEditReply

from .boxinfo import tools_destination_of

MAX_IMAGES_CHARS = 3 * 1024 * 1024
"""The data URLs one question may carry, in all: under the bus's 4 MiB message limit."""


def attach(path: str, attached: list[str]) -> str:
    """Run ``/image PATH``: add the image's data URL to ``attached`` (the next question's
    images); the line to print."""
    if not path:
        return "xrmq chat: /image PATH: name the image file to show with the next question"
    try:
        url = image_url(path, "/image")
    except ValueError as error:
        return f"xrmq chat: {error}"
    if sum(map(len, attached)) + len(url) > MAX_IMAGES_CHARS:
        return (
            f"xrmq chat: /image: {path} is too large to send: the images of one question "
            f"must fit in {MAX_IMAGES_CHARS // (1024 * 1024)} MiB as data URLs"
        )
    attached.append(url)
    return f"xrmq chat: {path} will be shown with the next question ({len(attached)} image(s))"


async def take_back(
    runtime: AgentRuntime,
    participant_id: str,
    line: str,
    last: str | None,
    *,
    tools: Sequence[str] | None,
    timeout: float = 10.0,
) -> tuple[str, str | None, tuple[str, ...]]:
    """Run ``/retry`` or ``/revise TEXT``: the line to print, the question to ask now
    (None: nothing to ask, the line says why) and, for ``/retry``, its images."""
    command, _, revised = line.partition(" ")
    name = command[1:]
    revised = revised.strip()
    if command == "/revise" and not revised:
        return "xrmq chat: /revise TEXT: say what to ask instead", None, ()
    if last is None:
        return f"xrmq chat: {command}: nothing was answered yet", None, ()
    if tools is not None and last not in tools:
        return (
            f"xrmq chat: {command}: {last!r} answered last and keeps no transcript of its own; "
            f"only a tools destination's answer can be taken back "
            f"(the box's tools destinations: {', '.join(tools) or 'none'})",
            None,
            (),
        )
    reply = await _ask(runtime, participant_id, last, name, timeout)
    if isinstance(reply, str):
        return f"xrmq chat: {command}: {reply}", None, ()
    if not reply.question:
        return f"xrmq chat: {command}: {last} holds no question to take back", None, ()
    if revised:
        return f"xrmq chat: asking {last} again: {revised}", revised, ()
    shown = f" (with {len(reply.images)} image(s))" if reply.images else ""
    return f"xrmq chat: asking {last} again: {reply.question}{shown}", reply.question, reply.images


async def render(
    runtime: AgentRuntime,
    participant_id: str,
    line: str,
    last: str | None,
    *,
    tools: Sequence[str] | None,
    timeout: float = 10.0,
) -> str:
    """Run ``/render FILE``: the line to print."""
    target = line.partition(" ")[2].strip()
    if not target:
        return "xrmq chat: /render FILE: name the HTML file to write"
    try:
        destination = tools_destination_of(None, last, tools, "the box's")
    except ValueError as error:
        return f"xrmq chat: /render: {error}"
    reply = await _ask(runtime, participant_id, destination, "render", timeout)
    if isinstance(reply, str):
        return f"xrmq chat: /render: {reply}"
    conversation = Conversation.loads(reply.conversation)
    page = conversation.render_history_as_html(f"{participant_id} at {destination}")
    try:
        Path(target).write_text(page, encoding="utf-8")
    except OSError as error:
        return f"xrmq chat: /render: cannot write {target}: {error.strerror}"
    return f"xrmq chat: rendered {len(conversation.messages)} messages of {destination} to {target}"


async def _ask(
    runtime: AgentRuntime, participant_id: str, destination: str, action: str, timeout: float
) -> TranscriptEditReply | str:
    """The destination's reply to one edit, or why there is none."""
    try:
        return await runtime.ask(
            edit_topic(destination),
            TranscriptEdit(action),
            reply_type=TranscriptEditReply,
            participant_id=participant_id,
            timeout=timeout,
        )
    except TimeoutError:
        return f"{destination!r} is not a tools destination (no answer within {timeout:g} s)"
    except AskError as error:
        return str(error)
