"""``xrmq chat`` on a real (pseudo-)terminal: what is typed while a reply streams is kept out of
the reply's line, then shown after it and asked next."""

from __future__ import annotations

import asyncio
import termios

import pytest

from xrmq.actors.runtime import Agent, AgentRuntime, Handlers, RuntimeContext
from xrmq.schemas import ResponseOutput, UserQuery
from xrmq.topics import QUERY_TOPIC, VOICE_OUTPUT_TOPIC

from buses import broker_process
from chat_terminal import chat_on_terminal

pytestmark = pytest.mark.timeout(60)


class HeldReply(Agent):
    """Answers each query in two fragments; the first query's second fragment waits for
    ``release`` (the test types meanwhile)."""

    def __init__(self) -> None:
        self.release = asyncio.Event()
        self.queries: list[str] = []

    def handlers(self) -> Handlers:
        return {QUERY_TOPIC: self.on_query}

    async def on_query(self, message: UserQuery, ctx: RuntimeContext) -> None:
        self.queries.append(message.text)
        request = ctx.metadata.message_id
        for text, final in (("Part one,", False), (" part two.", True)):
            if final and len(self.queries) == 1:
                await self.release.wait()
            ctx.runtime.send(
                VOICE_OUTPUT_TOPIC,
                ResponseOutput("reply", text, request_id=request, response_id=request, final=final),
                participant_id=ctx.participant_id,
                source="conversation",
            )


async def test_text_typed_while_a_reply_streams_on_a_terminal_is_kept_out_of_it():
    with broker_process() as bus:
        replier = HeldReply()
        box = AgentRuntime(bus, name="box")
        box.register("replier", replier)
        async with box:
            with chat_on_terminal(bus, "--participant", "tia") as (terminal, chat):

                def echoes() -> bool:  # the terminal's own setting, as the chat left it
                    return bool(termios.tcgetattr(terminal.slave)[3] & termios.ECHO)

                at = await terminal.read_until("you> ")
                terminal.type("first question\n")  # echoed: no reply is streaming
                at = await terminal.read_until("conversation: Part one,", at)
                assert not echoes()  # muted while the reply streams
                terminal.type("second question\n")  # typed while the reply streams
                replier.release.set()
                reply_ends = await terminal.read_until("\n", at)
                at = await terminal.read_until("you> second question", reply_ends)
                await terminal.read_until("conversation: Part one, part two.", at)
                terminal.type("/quit\n")
                assert await asyncio.to_thread(chat.wait, 30) == 0
                assert echoes()  # and left as it was found
    printed = terminal.output.replace("\r\n", "\n")
    first_reply = printed.index("conversation: Part one,")
    assert printed[first_reply:].split("\n")[0] == "conversation: Part one, part two."
    assert printed.count("second question") == 1  # never echoed into the reply, shown once after
    assert printed.index("second question") > first_reply + len("conversation: Part one, part two.")
    assert replier.queries == ["first question", "second question"]
