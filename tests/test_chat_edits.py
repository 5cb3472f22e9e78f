"""``/retry``, ``/revise TEXT`` and ``/render FILE`` typed into ``xrmq chat`` on a terminal,
against a running edge box with a tools destination: the transcript there loses the
taken-back turns, the questions are asked again, and the rendered page opens in headless
Chromium with the turns in it."""

from __future__ import annotations

import asyncio
import shutil
import subprocess

import pytest
from test_tools_durable import load, tools_stack_config

from xrmq.actors.runtime import AgentRuntime
from xrmq.actors.tools.store import held_messages

from buses import PROCS
from chat_terminal import chat_on_terminal

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")


def dump_dom(path) -> str:
    """The page at ``path`` as headless Chromium parsed it (its DOM, serialised)."""
    if CHROMIUM is None:
        pytest.skip("headless Chromium is not installed (apt-get install -y chromium)")
    done = subprocess.run(
        [
            CHROMIUM,
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--disable-background-networking",
            "--dump-dom",
            f"file://{path}",
        ],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    return done.stdout


@pytest.mark.timeout(240)
async def test_retry_revise_and_render_in_chat_on_a_running_box(monkeypatch, tmp_path):
    from xrmq.actors.edge.private_stack import PrivateStack

    monkeypatch.setenv("PYTHONPATH", str(PROCS))  # the camera process's role: edge_roles
    monkeypatch.syspath_prepend(str(PROCS))
    page = tmp_path / "talk & <notes>.html"
    async with PrivateStack(tools_stack_config()) as stack:
        with chat_on_terminal(stack.bus, env={"PYTHONPATH": str(PROCS)}) as (terminal, chat):
            async with asyncio.timeout(200):
                at = await terminal.read_until("xrmq chat: ready participant=")
                ready = await terminal.read_until("you> ", at)
                participant = terminal.output[at:ready].split()[0]
                at = ready
                terminal.type("What is on the bench?\n")
                at = await terminal.read_until("lab-tools: ", at)
                at = await terminal.read_until("you> ", at)
                terminal.type("/retry\n")
                at = await terminal.read_until(
                    "xrmq chat: asking lab-tools again: What is on the bench?", at
                )
                at = await terminal.read_until("lab-tools: ", at)
                at = await terminal.read_until("you> ", at)
                terminal.type("/revise Is the <camera> on the bench & working?\n")
                at = await terminal.read_until(
                    "xrmq chat: asking lab-tools again: Is the <camera> on the bench & working?",
                    at,
                )
                at = await terminal.read_until("lab-tools: ", at)
                at = await terminal.read_until("you> ", at)
                terminal.type(f"/render {page}\n")
                at = await terminal.read_until("xrmq chat: rendered ", at)
                at = await terminal.read_until("you> ", at)
                terminal.type("/quit\n")
                assert await asyncio.to_thread(chat.wait, 30) == 0
            client = AgentRuntime(stack.bus, name="test-client")
            async with client:
                state = await load(client, participant)
        assert not stack.failed
    printed = terminal.output.replace("\r\n", "\n")
    assert f"of lab-tools to {page}" in printed
    messages = held_messages(state.messages)
    users = [m["content"] for m in messages if m["role"] == "user"]
    assert users == ["Is the <camera> on the bench & working?"]  # retried, then revised
    assert [m["role"] for m in messages] == ["user", "assistant", "tool", "assistant"]
    dom = dump_dom(page)
    assert "Is the &lt;camera&gt; on the bench &amp; working?" in dom
    assert "<camera>" not in dom  # escaped: text, not an element
    call = messages[1]["tool_calls"][0]
    call_id, name, last = call["id"], call["function"]["name"], messages[-1]["content"]
    summary = f"<summary>tool call: {name} ({call_id})</summary>"
    assert f'<details class="tool-call">{summary}<pre>{{}}</pre></details>' in dom
    assert f'<details class="tool-result"><summary>tool result ({call_id})</summary>' in dom
    # The camera was asked three times: the question, its retry, the revised question.
    assert "<pre>View 3: a red multimeter" in dom
    assert f'<div class="text">{last}</div>' in dom


@pytest.mark.timeout(60)
async def test_retry_revise_and_render_say_what_they_need_when_they_cannot_run():
    import io

    from xrmq.actors.edge.chat import chat

    from buses import broker_process

    with broker_process() as bus:
        out = io.StringIO()
        lines = "/retry\n/revise\n/revise   \n/render\n/help\n/quit\n"
        assert await chat(bus, "p1", timeout=10, out=out, stdin=io.StringIO(lines)) == 0
    printed = out.getvalue()
    assert "xrmq chat: /retry: nothing was answered yet" in printed
    assert printed.count("xrmq chat: /revise TEXT: say what to ask instead") == 2
    assert "xrmq chat: /render FILE: name the HTML file to write" in printed
    assert "/revise TEXT  drop the last answer and its question there" in printed


@pytest.mark.timeout(60)
async def test_only_a_tools_destination_with_a_question_can_take_it_back():
    from tools_doubles import Probe, never_started, probe_reading, session_model

    from xrmq.actors.edge.chat_edits import take_back
    from xrmq.actors.tools.edits import TranscriptEditServer
    from xrmq.actors.tools.policy import AutoCompactor
    from xrmq.actors.tools.tool import Tool
    from xrmq.actors.tools.tool_agent import ToolAgent
    from xrmq.schemas import AgentTurn
    from xrmq.topics import VOICE_OUTPUT_TOPIC

    from buses import broker_process
    from router_doubles import FakeContext

    context = FakeContext()
    with broker_process() as bus:
        runtime = AgentRuntime(bus, name="tools-box")
        agent = ToolAgent(
            session_model(),
            context=context,
            runtime=runtime,
            output_topic=VOICE_OUTPUT_TOPIC,
            tools=[Tool("probe", "Read a probe.", Probe, probe_reading)],
            compactor=AutoCompactor(enabled=False),
        )
        runtime.register("lab-tools-transcript", TranscriptEditServer("lab-tools", agent))
        async with runtime:
            elsewhere = await take_back(
                runtime, "p1", "/retry", "conversation", tools=["lab-tools"]
            )
            empty = await take_back(runtime, "p1", "/retry", "lab-tools", tools=["lab-tools"])
            pixel = "data:image/png;base64,AAAA"
            shown = AgentTurn("p1", "t1", "Read probe 1.", timestamp_us=1, images=(pixel,))
            await agent.answer(shown, started=never_started)
            retried = await take_back(runtime, "p1", "/retry", "lab-tools", tools=["lab-tools"])
    assert elsewhere == (
        "xrmq chat: /retry: 'conversation' answered last and keeps no transcript of its own; "
        "only a tools destination's answer can be taken back "
        "(the box's tools destinations: lab-tools)",
        None,
        (),
    )
    assert empty == ("xrmq chat: /retry: lab-tools holds no question to take back", None, ())
    assert retried == (
        "xrmq chat: asking lab-tools again: Read probe 1. (with 1 image(s))",
        "Read probe 1.",
        (pixel,),
    )
    assert agent.transcript("p1").messages == []
    assert ("retract", "p1", "t1") in context.log  # its exchange, by its turn id
    assert context.blocks("p1") == ()
