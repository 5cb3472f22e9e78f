"""``xrmq chat --private-stack``: a line typed on stdin is answered; /quit stops the stack it
started."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from buses import expect_line, processes_mentioning, reap

pytestmark = pytest.mark.timeout(60)


def test_chat_answers_a_typed_line_from_the_participants_context_and_quits(tmp_path):
    env = {
        **os.environ,
        "TMPDIR": str(tmp_path),
        "XRMQ_RUNTIME_DIR": str(tmp_path),
        "XRMQ_LOG_LEVEL": "WARNING",
    }
    chat = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "xrmq.actors.cli",
            "chat",
            "--private-stack",
            "--participant",
            "ann",
        ],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
    )
    try:
        expect_line(chat, "xrmq chat: ready participant=ann bus=ipc://")
        chat.stdin.write("My locker is number 318.\n")
        chat.stdin.flush()
        expect_line(chat, "conversation: ")
        chat.stdin.write("Which number is my locker?\n")
        chat.stdin.flush()
        answer = expect_line(chat, "conversation: ")
        chat.stdin.write("/quit\n")
        chat.stdin.flush()
        assert chat.wait(timeout=30) == 0, chat.stderr.read()[-3000:]
    finally:
        reap(chat)
    assert answer == "conversation: Your locker is number 318."
    assert processes_mentioning(str(tmp_path)) == []
    assert list(tmp_path.iterdir()) == []


def test_the_former_flag_name_embedded_still_selects_a_private_stack():
    from xrmq.actors.cli import build_parser

    for flag in ("--private-stack", "--embedded"):
        assert build_parser().parse_args(["chat", flag]).private_stack is True
    assert build_parser().parse_args(["chat"]).private_stack is False


async def test_chat_commands_are_never_sent_as_queries():
    import asyncio
    import io

    from xrmq.actors.edge.chat import HELP, chat
    from xrmq.actors.routing import AgentRouter, SingleDestination
    from xrmq.actors.runtime import AgentRuntime
    from xrmq.schemas import DestinationResult
    from xrmq.topics import QUERY_TOPIC, VOICE_OUTPUT_TOPIC

    from router_doubles import Destination, Log

    class Leaving(Destination):
        left = asyncio.Event()

        async def participant_left(self, participant_id: str) -> None:
            await super().participant_left(participant_id)
            self.left.set()

    log = Log()
    front = AgentRuntime(name="box")
    destination = Leaving("conversation", log, answers=[DestinationResult("fine")])
    router = front.register(
        "router",
        AgentRouter(
            {"conversation": destination},
            SingleDestination(),
            query_topic=QUERY_TOPIC,
            output_topic=VOICE_OUTPUT_TOPIC,
        ),
    )
    out = io.StringIO()
    async with front:
        code = await chat(
            front.address,
            "ann",
            timeout=10,
            stdin=io.StringIO("/help\n/nope\nHello?\n/clear\n/quit\n"),
            out=out,
        )
        assert destination.left.is_set()  # /clear returned once the router confirmed it
        await router.stop()
    assert code == 0
    text = out.getvalue()
    assert HELP in text
    assert "xrmq chat: unknown command '/nope' (/help lists them)" in text
    assert "xrmq chat: cleared ann: the edge box forgot all it held of them" in text
    assert [entry[2] for entry in log.of("answer")] and len(
        log.of("answer")
    ) == 1  # only "Hello?" was asked
    assert ("left", "conversation", "ann") in [entry[:3] for entry in log]


async def test_chat_clear_names_the_destination_that_did_not_forget():
    import io

    from xrmq.actors.edge.chat import chat
    from xrmq.actors.routing import AgentRouter, SingleDestination
    from xrmq.actors.runtime import AgentRuntime
    from xrmq.topics import QUERY_TOPIC, VOICE_OUTPUT_TOPIC

    from router_doubles import Destination, Log

    class Stuck(Destination):
        async def participant_left(self, participant_id: str) -> None:
            raise TimeoutError("the transcript store 'tools' did not answer")

    front = AgentRuntime(name="box")
    router = front.register(
        "router",
        AgentRouter(
            {"tools": Stuck("tools", Log())},
            SingleDestination(),
            query_topic=QUERY_TOPIC,
            output_topic=VOICE_OUTPUT_TOPIC,
        ),
    )
    out = io.StringIO()
    async with front:
        code = await chat(front.address, "ann", timeout=10, stdin=io.StringIO("/clear\n"), out=out)
        await router.stop()
    assert code == 0
    assert (
        "xrmq chat: /clear: not forgotten everywhere: "
        "tools: TimeoutError: the transcript store 'tools' did not answer"
    ) in out.getvalue().splitlines()
