"""A failed turn ends with its cause: the router's ``TurnEnded`` closes the turn for every
front end, and the destination's error travels with it (issue 17, item 1).

In process (two runtimes on one bus): an unreachable model, a missing destination, a
destination that forgets the call (a restart). Across processes: ``xrmq say`` against
``xrmq up`` with an unreachable model and with a conversation killed mid-answer, and
against a router whose destination never started.
"""

from __future__ import annotations

import asyncio
import os
import re
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from xrmq.actors.conversation import Conversation
from xrmq.actors.edge.config import reply_wait_s
from xrmq.actors.edge.config_loader import decode_config, load_config
from xrmq.actors.edge.replies import ReplyCollector, ask
from xrmq.actors.models import LiteLLMService
from xrmq.actors.models.litellm_service import import_litellm
from xrmq.actors.routing import AgentRouter, SingleDestination, remote, serve
from xrmq.actors.runtime import AgentRuntime
from xrmq.schemas import DestinationResult
from xrmq.topics import QUERY_TOPIC, VOICE_OUTPUT_TOPIC

from buses import broker_process, expect_line, reap
from openai_server import OpenAIServer, Reply
from router_doubles import Destination, FakeContext, Log

CLI = [sys.executable, "-m", "xrmq.actors.cli"]
FAILURE_TEXT = "Sorry, something went wrong. Please try again."


@contextmanager
def refused_port() -> Iterator[int]:
    """A loopback TCP port that refuses connections: bound (nobody else takes it), not listening."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        yield sock.getsockname()[1]


def front_and_back(
    *, proxy_timeout_s: float = 5.0
) -> tuple[AgentRuntime, AgentRuntime, ReplyCollector]:
    """A router (a proxy to ``conversation``) and a collector in front; ``back`` for the rest."""
    front = AgentRuntime(name="front")
    back = AgentRuntime(front.address, name="back")
    collector = front.register("replies", ReplyCollector())
    proxy = front.register("conversation-proxy", remote("conversation", timeout_s=proxy_timeout_s))
    front.register(
        "router",
        AgentRouter(
            {"conversation": proxy},
            SingleDestination(),
            query_topic=QUERY_TOPIC,
            output_topic=VOICE_OUTPUT_TOPIC,
        ),
    )
    return front, back, collector


@pytest.mark.timeout(120)  # litellm's import takes seconds on a loaded machine
async def test_a_turn_whose_model_is_unreachable_ends_with_the_models_error_after_the_router_text():
    import_litellm()
    front, back, collector = front_and_back()
    with refused_port() as port:
        api_base = f"http://127.0.0.1:{port}/v1"
        llm = LiteLLMService("hosted_vllm/m", api_base=api_base, retries=0)
        conversation = Conversation(
            llm, context=FakeContext(), runtime=back, output_topic=VOICE_OUTPUT_TOPIC
        )
        back.register("conversation-server", serve("conversation", conversation))
        async with front, back:
            turn = ask(front, collector, "p1", "Where is the key?")
            await turn.wait(60)
    assert turn.router_text == FAILURE_TEXT
    assert turn.outcome.status == "failed" and turn.outcome.route == "conversation"
    assert turn.outcome.error == (
        f"ModelUnavailable: model hosted_vllm/m at {api_base}: connection refused"
    )
    assert turn.failure == f"turn failed: {turn.outcome.error}"


class HeardSink:
    """A renderer's sink that records what one participant hears: (sources, text) per
    segment."""

    def __init__(self, participant_id: str) -> None:
        self.participant_id = participant_id
        self.heard: list[tuple[tuple[str, ...], str]] = []
        self.router_spoke = asyncio.Event()

    async def play(self, segment) -> None:
        if segment.participant_id != self.participant_id:
            return
        self.heard.append((segment.sources, segment.text))
        if "router" in segment.sources:
            self.router_spoke.set()

    async def end(self, ended) -> None:
        pass


DROPPING = Reply(chunks=("The spare key", " is in", " drawer 12."), drop_after=2)
"""A model that sends two tokens of its answer and then drops the connection."""


@contextmanager
def dropping_model() -> Iterator[tuple[OpenAIServer, LiteLLMService]]:
    with OpenAIServer(DROPPING) as server:
        yield server, LiteLLMService("hosted_vllm/m", api_base=server.api_base, retries=0)


@pytest.mark.timeout(120)  # litellm's import takes seconds on a loaded machine
async def test_a_reply_that_fails_mid_way_is_marked_and_the_listener_hears_an_apology():
    """Issue 29, item 4: the partial reply is printed with a marker naming the cause, and
    the router apologizes on the output topic after it (never a silently cut sentence)."""
    import io

    from xrmq.actors.edge.chat import say
    from xrmq.actors.voice import VoiceRenderer

    import_litellm()
    front, back, collector = front_and_back()
    sink = HeardSink("p1")
    front.register("renderer", VoiceRenderer(sink))
    with dropping_model() as (server, llm):
        conversation = Conversation(
            llm, context=FakeContext(), runtime=back, output_topic=VOICE_OUTPUT_TOPIC
        )
        back.register("conversation-server", serve("conversation", conversation))
        async with front, back:
            turn = ask(front, collector, "p1", "Where is the spare key?")
            await turn.wait(60)
            await turn.wait_outcome(10)
            await asyncio.wait_for(sink.router_spoke.wait(), 10)
            out = io.StringIO()
            code = await say(front.address, "p2", "And the other one?", timeout=60, out=out)
    cause = (
        f"ModelUnavailable: model hosted_vllm/m at {server.api_base}: stream dropped after 2 tokens"
    )
    assert turn.outcome.error == cause
    assert turn.answer == "The spare key is in"
    assert turn.marked == f"The spare key is in [reply failed mid-way: {cause}]"
    heard = [(sources[0], text.strip()) for sources, text in sink.heard]
    assert heard[-1] == ("router", "Sorry, I lost the rest of that answer.")
    assert " ".join(text for source, text in heard[:-1]) == "The spare key is in"
    assert code == 1
    assert out.getvalue() == f"The spare key is in [reply failed mid-way: {cause}]\n"


def test_the_marker_follows_the_partial_answer_whenever_the_apology_arrives():
    """The router's apology may reach a front end before the destination's final frame
    (they come from two publishers): the printed text is the same either way."""
    from xrmq.actors.edge.replies import Turn
    from xrmq.schemas import TurnEnded

    apology = ("router", "Sorry, I lost the rest of that answer.")
    for parts in (
        [("conversation", "The spare key"), ("conversation", " is in"), apology],
        [("conversation", "The spare key"), apology, ("conversation", " is in")],
    ):
        turn = Turn("p1", "Where is the spare key?", "t1", 0.0, parts=parts)
        turn.outcome = TurnEnded("t1", "failed", "conversation", "Boom: cut")
        assert turn.router_text == ""
        assert turn.spoken == "The spare key is in Sorry, I lost the rest of that answer."
        assert turn.marked == "The spare key is in [reply failed mid-way: Boom: cut]"
    before = Turn("p1", "Hi", "t2", 0.0, parts=[("router", "Sorry, something went wrong.")])
    before.outcome = TurnEnded("t2", "failed", "conversation", "Boom: down")
    assert before.midway == "" and before.marked == "Sorry, something went wrong."


@pytest.mark.timeout(120)
async def test_chat_marks_a_reply_that_failed_mid_way(capsys):
    import io

    from xrmq.actors.edge.chat import chat

    import_litellm()
    front, back, _ = front_and_back()
    with dropping_model() as (server, llm):
        conversation = Conversation(
            llm, context=FakeContext(), runtime=back, output_topic=VOICE_OUTPUT_TOPIC
        )
        back.register("conversation-server", serve("conversation", conversation))
        out = io.StringIO()
        async with front, back:
            code = await chat(
                front.address,
                "p1",
                timeout=60,
                stdin=io.StringIO("Where is the spare key?\n/quit\n"),
                out=out,
            )
    cause = (
        f"ModelUnavailable: model hosted_vllm/m at {server.api_base}: stream dropped after 2 tokens"
    )
    assert code == 0
    assert f"conversation: The spare key is in [reply failed mid-way: {cause}]\n" in out.getvalue()
    assert f"xrmq chat: turn failed: {cause}" in capsys.readouterr().err


async def test_a_turn_without_its_destination_ends_unanswered_naming_the_unreachable_destination():
    front, _back, collector = front_and_back(proxy_timeout_s=0.3)  # nothing serves "conversation"
    async with front:
        turn = ask(front, collector, "p1", "Hello?")
        await turn.wait(10)
    assert turn.router_text == "Sorry, I can't help with that."
    assert turn.outcome.status == "unanswered"
    assert re.fullmatch(
        r"NoDestination: conversation: unreachable \(TimeoutError: .*route\.conversation\.aid.*\)",
        turn.outcome.error,
    ), turn.outcome.error


async def test_a_destination_that_forgets_a_running_answer_fails_the_turn_as_lost():
    """A restarted destination answers ``unknown`` to the proxy's status check."""
    front, back, collector = front_and_back()
    log = Log()
    destination = Destination("conversation", log, answers=["hang"])
    server = back.register("conversation-server", serve("conversation", destination))
    async with front, back:
        turn = ask(front, collector, "p1", "Tell me a long story.")
        await destination.answering.wait()
        server._calls.clear()  # what a new incarnation knows of the call: nothing
        await turn.wait(10)
    assert turn.outcome.status == "failed"
    assert turn.outcome.error == (
        "DestinationLost: the destination no longer knows this answer (it restarted mid-turn)"
    )


async def test_an_answered_turn_ends_answered_after_its_final_frame():
    front, back, collector = front_and_back()
    destination = Destination("conversation", Log(), answers=[DestinationResult("fine")])
    back.register("conversation-server", serve("conversation", destination))
    async with front, back:
        turn = ask(front, collector, "p1", "All good?")
        await turn.wait(10)
        outcome = await turn.wait_outcome(10)
    assert outcome.status == "answered" and outcome.error is None and turn.failure is None


# ---------------------------------------------------------------------------- across processes


def write_config(path: Path, bus: str, answers: str, processes: str) -> Path:
    path.write_text(
        f'[bus]\naddress = "{bus}"\n\n[models]\nanswers = {answers}\n\n'
        '[context.topics.notes]\nmode = "incremental"\n\n'
        '[destinations.conversation]\ndescription = "General assistant."\n\n' + processes
    )
    return path


STACK = """
[processes.context]
roles = ["context"]
[processes.conversation]
roles = ["conversation"]
after = ["context"]
[processes.router]
roles = ["router"]
after = ["conversation"]
"""


@contextmanager
def edge_box(config: Path, env: dict) -> Iterator[tuple[subprocess.Popen, dict[str, int]]]:
    up = subprocess.Popen(
        [*CLI, "up", str(config)],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        env=env,
    )
    try:
        ready = expect_line(up, "xrmq up: ready")
        yield (
            up,
            {name: int(pid) for name, pid in re.findall(r"(\S+)=(\d+)", ready) if name != "bus"},
        )
    finally:
        reap(up)


def say(
    env: dict, bus: str, text: str, timeout: float = 60, *options: str
) -> tuple[subprocess.CompletedProcess, float]:
    """``xrmq say`` with ``--timeout timeout`` (``options`` instead, when given)."""
    began = time.monotonic()
    result = subprocess.run(
        [*CLI, "say", "--bus", bus, *(options or ("--timeout", str(timeout))), text],
        capture_output=True,
        text=True,
        env=env,
        timeout=timeout + 30,
    )
    return result, time.monotonic() - began


def quiet_env(tmp_path: Path) -> dict:
    return {**os.environ, "XRMQ_RUNTIME_DIR": str(tmp_path), "XRMQ_LOG_LEVEL": "ERROR"}


@pytest.mark.timeout(150)
def test_say_exits_with_the_cause_when_the_model_is_unreachable(tmp_path):
    env = quiet_env(tmp_path)
    bus = f"ipc://{tmp_path}/bus"
    with refused_port() as port:
        api_base = f"http://127.0.0.1:{port}/v1"
        answers = f'{{ preset = "local", api_base = "{api_base}", retries = 0 }}'
        with edge_box(write_config(tmp_path / "edge.toml", bus, answers, STACK), env):
            result, elapsed = say(env, bus, "Where is the spare key?")
    assert result.returncode == 1, result.stderr
    assert result.stdout.strip() == FAILURE_TEXT
    assert result.stderr.startswith(
        "xrmq say: turn failed: ModelUnavailable: model hosted_vllm/Qwen/Qwen3-4B at "
        f"{api_base}: connection refused\n"
    ), result.stderr
    assert elapsed < 30  # the turn ended with the failure, not with say's 60 s timeout


@pytest.mark.timeout(150)
def test_say_reports_a_stalled_model_with_its_cause_before_its_default_timeout(tmp_path):
    """Issue 29, item 3: a model that accepts the connection and sends nothing fails the
    turn (``ModelTimeout``) before a ``say`` that kept its default wait gives up."""
    env = quiet_env(tmp_path)
    bus = f"ipc://{tmp_path}/bus"
    with OpenAIServer(Reply(hang="before")) as server:
        answers = (
            f'{{ preset = "local", api_base = "{server.api_base}", retries = 0, timeout_s = 3 }}'
        )
        path = write_config(tmp_path / "edge.toml", bus, answers, STACK)
        default_wait = reply_wait_s(load_config(path))
        with edge_box(path, env):
            result, elapsed = say(
                env, bus, "Where is the spare key?", default_wait, "--config", str(path)
            )
    assert result.returncode == 1, result.stderr
    assert result.stderr.startswith(
        "xrmq say: turn failed: ModelTimeout: model hosted_vllm/Qwen/Qwen3-4B at "
        f"{server.api_base}: no token in 3 s\n"
    ), result.stderr
    assert server.requests  # the model was asked, and stalled
    assert elapsed < default_wait  # the turn ended with its cause, not with say's wait


def test_the_clients_default_wait_outlasts_every_model_a_turn_waits_for():
    """A client's default wait (``xrmq say``/``xrmq chat --timeout``) is the box's
    first-token timeout plus a margin: the box reports a stalled model first."""
    local = decode_config({"models": {"answers": "local"}})
    assert local.models.answers.timeout_s == 30  # the preset issue 29 tripped over
    assert reply_wait_s(local) > 30
    slow = decode_config(
        {
            "models": {"answers": {"preset": "local", "timeout_s": 5}},
            "destinations": {
                "conversation": {"description": "General."},
                "slow": {"description": "Slow.", "model": {"model": "offline", "timeout_s": 90}},
            },
        }
    )
    assert reply_wait_s(slow) > 90  # a destination's own model counts
    choosing = decode_config(
        {
            "models": {"answers": {"preset": "local", "timeout_s": 5}, "routing": "local"},
            "router": {"decisions": "llm"},
        }
    )
    assert reply_wait_s(choosing) > 5 + 30  # the routing decision comes first


@pytest.mark.timeout(90)
def test_say_exits_with_the_cause_when_no_destination_answers(tmp_path):
    env = quiet_env(tmp_path)
    with broker_process() as bus:
        config = write_config(tmp_path / "edge.toml", bus, '"offline"', "")
        router = subprocess.Popen(
            [*CLI, "run", "router", "--config", str(config)],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=env,
        )
        try:
            expect_line(router, "xrmq run: ready")
            result, elapsed = say(env, bus, "Anyone home?", timeout=30)
        finally:
            reap(router)
    assert result.returncode == 1, result.stderr
    assert result.stdout.strip() == "Sorry, I can't help with that."
    assert result.stderr.startswith(
        "xrmq say: turn unanswered: NoDestination: conversation: unreachable ("
    ), result.stderr
    assert elapsed < 25


@pytest.mark.timeout(120)
def test_say_exits_with_the_cause_when_the_destination_restarts_mid_turn(tmp_path):
    env = quiet_env(tmp_path)
    bus = f"ipc://{tmp_path}/bus"
    slow = (
        '{ model = "offline", time_to_first_token_s = 0, tokens_per_second = 1 }'  # a long answer
    )
    config = write_config(tmp_path / "edge.toml", bus, slow, STACK)
    with edge_box(config, env) as (up, pids):
        sayer = subprocess.Popen(
            [*CLI, "say", "--bus", bus, "--timeout", "60", "I left my keys in drawer 12."],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=env,
        )
        try:
            listener = asyncio.run(first_fragment(bus))  # the answer is streaming
            os.kill(pids["conversation"], signal.SIGKILL)
            expect_line(up, "xrmq up: restarted conversation")
            _stdout, stderr = sayer.communicate(timeout=60)
        finally:
            reap(sayer)
    assert listener
    assert sayer.returncode == 1, stderr
    assert stderr.startswith("xrmq say: turn failed: DestinationLost: "), stderr


async def first_fragment(bus: str) -> str:
    """Wait for the first reply fragment with text on ``bus``'s voice output; return its source."""
    seen: asyncio.Future[str] = asyncio.get_running_loop().create_future()

    class Watcher(ReplyCollector):
        async def on_output(self, message, ctx) -> None:
            if message.text and not seen.done() and ctx.metadata.source != "router":
                seen.set_result(ctx.metadata.source)

    runtime = AgentRuntime(bus)
    runtime.register("watch", Watcher())
    async with runtime:
        return await asyncio.wait_for(seen, 30)


async def test_chat_shows_a_failed_turn_and_takes_the_next_line(capsys):
    import io

    from xrmq.actors.edge.chat import chat

    front, _, _ = front_and_back(proxy_timeout_s=0.3)  # nothing serves "conversation"
    out = io.StringIO()
    async with front:
        code = await chat(
            front.address,
            "p1",
            timeout=10,
            stdin=io.StringIO("Hello?\nStill nobody?\n/quit\n"),
            out=out,
        )
    assert code == 0
    assert out.getvalue().count("router: Sorry, I can't help with that.\n") == 2
    errors = capsys.readouterr().err.splitlines()
    failures = [
        line
        for line in errors
        if line.startswith("xrmq chat: turn unanswered: NoDestination: conversation")
    ]
    assert len(failures) == 2, errors
