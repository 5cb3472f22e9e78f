"""The edge box off the happy path, across real OS processes (issue 13, process level).

A hung process is noticed by its heartbeat and restarted; a destination killed in the
middle of an answer costs that turn only (its reply stream is closed, the next turn
is answered at once); SIGTERM lets the answer in flight finish and the box exits
promptly after it, leaving no process or socket file behind.
"""

from __future__ import annotations

import asyncio
import os
import re
import signal
import subprocess
import sys
import time

import pytest

from xrmq.actors.edge.replies import ROUTER_SILENCE_S, ReplyCollector, ask
from xrmq.actors.models.extractive import NO_MATCH_ANSWER
from xrmq.actors.runtime import AgentRuntime

from buses import processes_mentioning
from edge_box import Front, UpProcess, stack_config

pytestmark = pytest.mark.timeout(120)

CLI = [sys.executable, "-m", "xrmq.actors.cli"]
QUESTION = "How warm is the kettle?"  # no context: the offline model answers NO_MATCH_ANSWER


def pids_of(ready_line: str) -> dict[str, int]:
    return {name: int(pid) for name, pid in re.findall(r"(\S+)=(\d+)", ready_line)}


async def test_a_stopped_process_is_killed_when_its_heartbeat_stops_restarted_and_answers(tmp_path):
    timeout_s = 2.0
    up = UpProcess(
        stack_config(tmp_path, tokens_per_second=0, supervisor=f"liveness_timeout_s = {timeout_s}")
    )
    try:
        _, _, ready = await up.line("xrmq up: ready")
        conversation = pids_of(ready)["conversation"]
        async with Front(f"ipc://{tmp_path}/bus") as front:
            first = front.turn("p1", QUESTION)
            await first.wait(20)
            os.kill(conversation, signal.SIGSTOP)
            stopped_at = time.monotonic()
            index, killed_at, killed = await up.line("xrmq up: conversation: no heartbeat for ")
            silent = float(re.search(r"for ([\d.]+)s", killed)[1])
            assert timeout_s <= silent < timeout_s + 1.0, killed  # (printed to 0.1 s)
            _, _, exited = await up.line("xrmq up: conversation exited", after=index)
            assert "killed by SIGKILL" in exited and "restarting in 0.05s" in exited
            _, restarted_at, restarted = await up.line(
                "xrmq up: restarted conversation", after=index
            )
            assert int(restarted.rpartition("pid=")[2]) != conversation
            assert killed_at - stopped_at < timeout_s + 1.5  # the kill came with the timeout
            again = front.turn("p1", QUESTION)
            await again.wait(20)
            assert again.answer.strip()  # (it quotes the first exchange, now in p1's context)
        others = [line for line in up.texts() if "no heartbeat" in line]
        assert others == [killed]  # nothing else was taken for hung
    finally:
        up.reap()
    print(
        f"SIGSTOP -> killed {killed_at - stopped_at:.2f}s,"
        f" -> restarted {restarted_at - stopped_at:.2f}s"
    )


async def test_the_next_turn_after_a_destination_died_between_turns_waits_for_its_restart(
    tmp_path,
):
    """Killed between turns, with the next turn sent at once (the proxy has not yet heard it
    is gone): that turn is answered by the restarted process, not declined after 5 s."""
    up = UpProcess(
        stack_config(tmp_path, tokens_per_second=0, router="destination_dead_after_s = 1.0")
    )
    try:
        _, _, ready = await up.line("xrmq up: ready")
        conversation = pids_of(ready)["conversation"]
        async with Front(f"ipc://{tmp_path}/bus") as front:
            first = front.turn("p1", QUESTION)
            await first.wait(20)
            os.kill(conversation, signal.SIGKILL)
            nxt = front.turn("p1", QUESTION)
            await nxt.wait(30)
            outcome = await nxt.wait_outcome(10)
            _, _, restarted = await up.line("xrmq up: restarted conversation")
        assert outcome is not None and outcome.status == "answered", outcome
        assert nxt.answer.strip() and "can't help" not in nxt.answer, nxt.answer
        assert int(restarted.rpartition("pid=")[2]) != conversation
    finally:
        up.reap()


async def test_a_query_sent_while_the_router_was_down_fails_as_router_restarted(tmp_path):
    """Delivery is at most once: the router that comes back never saw the query, and the
    client says so at its first heartbeat instead of waiting out its timeout."""
    up = UpProcess(stack_config(tmp_path, tokens_per_second=0))
    try:
        _, _, ready = await up.line("xrmq up: ready")
        runtime = AgentRuntime(f"ipc://{tmp_path}/bus", name="front")
        collector = runtime.register("replies", ReplyCollector(router_silence_s=20))
        async with runtime:
            os.kill(pids_of(ready)["router"], signal.SIGKILL)
            lost = ask(runtime, collector, "p1", QUESTION)
            await lost.wait(30)
            again = ask(runtime, collector, "p1", QUESTION)
            await again.wait(30)
            outcome = await again.wait_outcome(10)
        assert lost.outcome is not None and lost.outcome.status == "failed"
        assert (lost.outcome.error or "").startswith("RouterRestarted: the router"), lost.outcome
        assert outcome is not None and outcome.status == "answered"
    finally:
        up.reap()


async def test_say_fails_fast_naming_the_router_when_it_is_hung(tmp_path):
    up = UpProcess(stack_config(tmp_path, supervisor="liveness_timeout_s = 120"))
    router = None
    try:
        _, _, ready = await up.line("xrmq up: ready")
        router = pids_of(ready)["router"]
        os.kill(router, signal.SIGSTOP)
        began = time.monotonic()
        said = await asyncio.to_thread(
            subprocess.run,
            [*CLI, "say", "--bus", f"ipc://{tmp_path}/bus", "--timeout", "60", QUESTION],
            capture_output=True,
            text=True,
            timeout=90,
            env={**os.environ, "XRMQ_LOG_LEVEL": "ERROR"},
        )
        elapsed = time.monotonic() - began
        assert said.returncode == 1, said
        assert "turn failed: RouterUnavailable: no router heard" in said.stderr, said.stderr
        assert elapsed < ROUTER_SILENCE_S + 10  # told within the silence, not the 60 s timeout
    finally:
        if router is not None:
            os.kill(router, signal.SIGCONT)
        up.reap()


async def test_a_destination_killed_mid_answer_costs_its_own_turn_only(tmp_path):
    up = UpProcess(
        stack_config(tmp_path, tokens_per_second=4, router="destination_dead_after_s = 1.0")
    )
    try:
        _, _, ready = await up.line("xrmq up: ready")
        conversation = pids_of(ready)["conversation"]
        async with Front(f"ipc://{tmp_path}/bus") as front:
            cut = front.turn("p1", QUESTION)
            await asyncio.wait_for(cut.started.wait(), 20)
            os.kill(conversation, signal.SIGKILL)
            killed_at = time.monotonic()
            await cut.wait(10)  # the reply stream got its final frame
            closed_s = time.monotonic() - killed_at
            assert cut.answer and cut.answer != NO_MATCH_ANSWER  # the answer was cut...
            # ...and its stream closed within 2 s, not at the renderer's 10 s idle timeout:
            assert closed_s < 2.0
            await up.line("xrmq up: restarted conversation")
            nxt = front.turn("p1", QUESTION)
            await nxt.wait(20)
            next_s = nxt.first_chunk_s
            assert nxt.answer == NO_MATCH_ANSWER
            assert next_s < 2.0  # normal latency (to the first chunk), not the 5 s drain
        lines = up.texts()
        assert any("remote.destination_died" in line for line in lines)
        assert not any("remote.drain_timeout" in line for line in lines)
    finally:
        up.reap()
    print(
        f"kill -9 -> stream closed {closed_s:.2f}s; next turn's first chunk {next_s:.2f}s"
        f" (first turn's {cut.first_chunk_s:.2f}s)"
    )


async def test_sigterm_mid_answer_finishes_the_answer_then_exits_promptly_leaving_nothing(tmp_path):
    up = UpProcess(stack_config(tmp_path, tokens_per_second=6))
    try:
        await up.line("xrmq up: ready")
        async with Front(f"ipc://{tmp_path}/bus") as front:
            turn = front.turn("p1", QUESTION)
            await asyncio.wait_for(turn.started.wait(), 20)
            up.proc.send_signal(signal.SIGTERM)
            await turn.wait(10)
            answered_at = time.monotonic()
            assert turn.answer == NO_MATCH_ANSWER  # finished, not cut
            assert await up.wait() == 0
            exited_s = time.monotonic() - answered_at
        assert up.texts()[-1] == "xrmq up: stopped"
        assert exited_s < 3.0  # prompt: no drain timeout waited out (bar: 1 s, docs/edge-box.md)
        assert not any("drain_timeout" in line or "did not stop" in line for line in up.texts())
    finally:
        up.reap()
    assert processes_mentioning(str(tmp_path)) == []  # no orphans
    assert sorted(p.name for p in tmp_path.iterdir()) == ["edge.toml"]  # no socket or lock files
    print(f"SIGTERM mid-answer: up exited {exited_s:.2f}s after the answer's final frame")


async def test_sigterm_with_an_answer_longer_than_the_grace_cancels_it_with_a_final_frame(tmp_path):
    # shutdown_timeout_s = 4: the router lets the 7 s answer run for 2.8 s, then cancels it.
    up = UpProcess(stack_config(tmp_path, tokens_per_second=1.5, shutdown_timeout_s=4))
    try:
        await up.line("xrmq up: ready")
        async with Front(f"ipc://{tmp_path}/bus") as front:
            turn = front.turn("p1", QUESTION)
            await asyncio.wait_for(turn.started.wait(), 20)
            up.proc.send_signal(signal.SIGTERM)
            await turn.wait(10)  # the cancelled answer still got its final frame
            assert turn.answer and turn.answer != NO_MATCH_ANSWER  # cut, not finished
            assert await up.wait() == 0
        lines = up.texts()
        assert lines[-1] == "xrmq up: stopped"
        # The router heard the cancelled call end (its runtime still read), and nothing was killed.
        assert not any("drain_timeout" in line or "did not stop" in line for line in lines)
    finally:
        up.reap()
    assert processes_mentioning(str(tmp_path)) == []
    assert sorted(p.name for p in tmp_path.iterdir()) == ["edge.toml"]
