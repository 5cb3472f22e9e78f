"""Issue 33 item 2: ``xrmq turns`` prints each turn's record and p50/p95 per stage; ``xrmq top``
has a conversation pane (the last turn's breakdown, query-to-first-chunk p50/p95, tokens).

The breakdown and the percentiles are pure (``actors/edge/turns.py``) and pinned on
records made here; the commands are run as a user runs them, against a real box.
"""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys

import msgspec
import pytest

from xrmq.actors.edge.turns import (
    FIRST_CHUNK,
    TurnStats,
    percentile,
    render_percentiles,
    render_turn,
    step_percentiles,
    steps,
)
from xrmq.schemas import CompactionTime, SectionSize, ToolCallTime, TurnRecord, TurnUsage

from buses import PROCS
from edge_box import Front, UpProcess, stack_config

pytestmark = pytest.mark.timeout(90)

CLI = [sys.executable, "-m", "xrmq.actors.cli"]
T0 = 1_800_000_000_000_000


def record(turn: str, *, first_chunk_ms: float, participant: str = "p1") -> TurnRecord:
    return TurnRecord(
        turn,
        participant,
        "answered",
        route="conversation",
        model="offline",
        query_us=T0,
        received_us=T0 + 1_000,
        routed_us=T0 + 1_500,
        model_request_us=T0 + 2_000,
        first_token_us=T0 + int(first_chunk_ms * 1000) - 500,
        first_chunk_us=T0 + int(first_chunk_ms * 1000),
        ended_us=T0 + int(first_chunk_ms * 1000) + 100_000,
        usage=TurnUsage(150, 10, estimated=True),
        crossed=("query", "model_request", "first_token", "first_chunk"),
    )


def test_steps_are_the_stages_passed_in_order_with_absent_stages_left_out():
    found = steps(record("t1", first_chunk_ms=50))
    assert [stage for stage, _, _ in found] == [
        "query",
        "received",
        "routed",
        "model_request",
        "first_token",
        "first_chunk",
        "ended",
    ]  # no admission: a fallback turn
    assert found[1] == ("received", 1.0, 1.0)
    assert found[-1][1] == 150.0


def test_percentiles_are_nearest_rank_per_step_and_for_query_to_first_chunk():
    assert percentile([5, 1, 3, 2, 4], 0.5) == 3
    assert percentile([5, 1, 3, 2, 4], 0.95) == 5
    table = step_percentiles(
        [record(f"t{n}", first_chunk_ms=ms) for n, ms in enumerate((50, 60, 70, 80))]
    )
    assert table[FIRST_CHUNK] == (60.0, 80.0, 4)
    assert table["received"] == (1.0, 1.0, 4)
    assert "admitted" not in table


def test_a_turn_renders_as_a_waterfall_with_its_usage_and_the_crossed_stages_marked():
    text = render_turn(record("turn-abc", first_chunk_ms=50))
    lines = text.splitlines()
    assert lines[0].startswith("p1  turn-abc  answered  via conversation  (offline)")
    assert "first chunk 50.0 ms" in lines[0] and "150+10 tokens (estimated)" in lines[0]
    assert lines[6].split()[0] == "first_chunk" and lines[6].endswith("| *")
    assert "over the last 1 turns" in render_percentiles([record("t", first_chunk_ms=5)])
    called = msgspec.structs.replace(
        record("t2", first_chunk_ms=50),
        tool_calls=(ToolCallTime("camera__look", T0 + 2_000, T0 + 14_500, failed=True),),
    )
    assert "  tool camera__look 12.5 ms (failed)" in render_turn(called).splitlines()
    sized = msgspec.structs.replace(
        record("t3", first_chunk_ms=50),
        context=(SectionSize("dialogue", 120, 4096), SectionSize("notes", 0, 2048)),
    )
    assert "  context dialogue 120/4096 B, notes 0/2048 B" in render_turn(sized).splitlines()
    compacted = msgspec.structs.replace(
        record("t4", first_chunk_ms=50),
        compactions=(CompactionTime("tools", "compacted", 1_000, 4_500, steps=2),),
    )
    assert "  compaction tools compacted 3.5 ms" in render_turn(compacted).splitlines()
    assert not any(line.startswith("  compaction") for line in lines)
    assert not any(line.startswith("  context") for line in lines)  # none reported: none shown


def test_the_conversation_pane_has_each_participants_last_turn_percentiles_and_tokens():
    stats = TurnStats()
    for n, ms in enumerate((50, 60, 70)):
        stats.observe(record(f"t{n}", first_chunk_ms=ms))
    stats.observe(record("q1", first_chunk_ms=20, participant="p2"))
    pane = stats.pane().splitlines()
    assert pane[0] == "conversations"
    assert pane[1] == ("  p1  3 turns  480 tokens  query->first chunk p50 60.0 ms p95 70.0 ms")
    assert pane[2].startswith("    last: answered via conversation  received +1.0")
    assert pane[3].startswith("  p2  1 turns  160 tokens")
    assert TurnStats().pane() == ""


def test_turns_rejects_a_count_below_one_naming_the_argument():
    done = subprocess.run(
        [*CLI, "turns", "--count", "0"], capture_output=True, text=True, timeout=30
    )
    assert done.returncode == 2 and "--count: must be >= 1" in done.stderr


async def line_of(stream: asyncio.StreamReader, marker: str, timeout: float = 30) -> str:
    async def find() -> str:
        while True:
            raw = await stream.readline()
            if not raw:
                raise AssertionError(f"the command ended without {marker!r}")
            text = raw.decode()
            if marker in text:
                return text

    return await asyncio.wait_for(find(), timeout)


async def test_turns_json_and_the_top_pane_show_a_box_turn(tmp_path):
    bus = f"ipc://{tmp_path}/bus"
    env = {**os.environ, "PYTHONPATH": str(PROCS)}
    up = UpProcess(stack_config(tmp_path, tokens_per_second=200))
    started: list[asyncio.subprocess.Process] = []
    try:
        await up.line("xrmq up: ready")
        turns = await asyncio.create_subprocess_exec(
            *CLI, "turns", "--bus", bus, "--json", "--count", "1",
            stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE, env=env,
        )  # fmt: skip
        started.append(turns)
        top = await asyncio.create_subprocess_exec(
            *CLI, "top", "--bus", bus, "--interval", "0.2",
            stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT, env=env,
        )  # fmt: skip
        started.append(top)
        assert turns.stderr is not None and top.stdout is not None
        await line_of(turns.stderr, "xrmq turns: ready")
        await line_of(top.stdout, "xrmq top")  # subscribed: it draws only once it started
        async with Front(bus) as front:
            turn = front.turn("p1", "How warm is the kettle?")
            await turn.wait(20)
        out, _ = await asyncio.wait_for(turns.communicate(), 30)
        assert turns.returncode == 0
        [line] = out.decode().splitlines()
        printed = json.loads(line)
        assert printed["turn_id"] == turn.request_id and printed["status"] == "answered"
        assert printed["query_us"] < printed["first_chunk_us"] < printed["ended_us"]
        assert "admitted_us" in printed and printed["usage"]["completion_tokens"] > 0
        last = await line_of(top.stdout, "    last: answered via conversation")
        assert "first_chunk +" in last and "ended +" in last
    finally:
        for process in started:
            if process.returncode is None:
                process.terminate()
                await process.wait()
        up.reap()
