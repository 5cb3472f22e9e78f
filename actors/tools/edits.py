"""Retry, revise and render over the bus: ``TranscriptEditServer`` (``xrmq chat``).

Tools destination NAME answers asks on ``tools.NAME.transcript`` (``TranscriptEdit`` ->
``TranscriptEditReply``) for the envelope's participant: ``retry`` and ``revise`` drop
the transcript's last question and everything after it (``ToolAgent.take_back``) and
reply with that question, which the chat then asks again (``/retry``) or replaces
(``/revise``), so the new turn finds the transcript as it was before the question;
``render`` replies with the transcript as a ``Conversation`` (``ToolAgent.conversation``)
in ``Conversation.dumps``'s JSON, which the chat renders as HTML (``/render``).
"""

from __future__ import annotations

from xrmq.actors.models.openai_messages import chat_message
from xrmq.actors.runtime import Agent, Handlers, RuntimeContext
from xrmq.schemas.tools import TranscriptEdit, TranscriptEditReply
from xrmq.topics import Topic

from .tool_agent import ToolAgent


def edit_topic(destination: str) -> Topic[TranscriptEdit]:
    """Where tools destination ``destination`` takes transcript edits."""
    return Topic(f"tools.{destination}.transcript", TranscriptEdit)


class TranscriptEditServer(Agent):
    """Runs ``agent``'s transcript edits for tools destination ``destination``."""

    def __init__(self, destination: str, agent: ToolAgent) -> None:
        self.destination = destination
        self.topic = edit_topic(destination)
        self.agent = agent

    def handlers(self) -> Handlers:
        return {self.topic: self.on_edit}

    async def on_edit(self, message: TranscriptEdit, ctx: RuntimeContext) -> TranscriptEditReply:
        pid = ctx.participant_id
        if pid is None:
            raise ValueError("TranscriptEdit: the envelope must name the participant")
        if message.action == "render":
            conversation = await self.agent.conversation(pid)
            return TranscriptEditReply("render", conversation=conversation.dumps())
        dropped = await self.agent.take_back(pid)
        if not dropped or dropped[0]["role"] != "user":
            return TranscriptEditReply(message.action, dropped=len(dropped))
        asked = chat_message(dropped[0])  # its text, and its image blocks' URLs
        return TranscriptEditReply(message.action, asked.content, len(dropped), images=asked.images)
