"""Tools suite: a tool call across processes against a direct call and a bus ask; tier-1
cost per reclaimed result; transcript memory over a long tool session.

``python -m bench --only tools`` (or ``--quick``).

- Round trip, sequential, p50 over N calls: the tool's function called directly
  (``Tool.invoke``: JSON arguments decoded, result text), a bus ask to a handler in
  another process (the ask a tool call is made of), and ``RemoteTool.call`` to a tool
  server in that same process (ask + catalogued tool + task per call + deferred reply).
- Streamed: ``RemoteTool.call`` with ``on_chunk`` (``ask_stream``) of the same tool,
  and of a generator tool yielding four chunks (time to its first chunk, and to its
  result).
- A transcript write (one tool turn: four messages, 1 KB) acknowledged by a
  ``TranscriptActor`` in that process, journaled in a context store (SQLite WAL, one
  commit per write here) against one held in memory only.
- Tier 1 (``compact_toolcall``, keep 12) over transcripts of 100 and 1,000 tool results
  of 2 KB each: microseconds per reclaimed result.
- A ToolAgent session of 1,000 tool calls (ScriptedLLM and a local tool, no pacing;
  docs/tools.md's AutoCompactor with a 20,000-token threshold, originals bounded at 40,000
  characters): traced memory every 20 calls (tracemalloc, after gc). It saw-tooths
  between compactions; flat: the last third's peak is not above the middle third's.
"""

from __future__ import annotations

import asyncio
import gc
import json
import tempfile
import time
import tracemalloc
from typing import Any

from xrmq.actors.models import (
    ChatMessage,
    ChatRequest,
    ScriptedLLM,
    ScriptedResponse,
    ToolCall,
    Usage,
)
from xrmq.actors.models.openai_messages import message_dict
from xrmq.actors.runtime import AgentRuntime, run
from xrmq.actors.tools import AutoCompactor, Tool, ToolAgent, compact_toolcall, remote_tool
from xrmq.actors.tools.store import (
    TranscriptAck,
    TranscriptTopics,
    TranscriptWrite,
    wire_messages,
)
from xrmq.schemas import AgentTurn
from xrmq.topics import VOICE_OUTPUT_TOPIC

from .procs import Worker, broker
from .stats import median, percentile
from .suite import Row, Series, Suite, SuiteContext, SuiteResult, bar
from .tools_workers import ECHO, PING, Ping

ARGS = json.dumps({"text": "bench reading 42"})


def _row(group: str, subject: str, unit: str, values: list[float], **extra: float) -> Row:
    return Row(
        group=group,
        subject=subject,
        unit=unit,
        median=median(values),
        repetitions=values,
        higher_is_better=False,
        extra=extra,
    )


def _turn_write(index: int) -> TranscriptWrite:
    """One tool turn's append (four messages, about 1 KB), the ``index``-th write."""
    call = ToolCall(f"c{index}", "probe", "{}")
    messages = wire_messages(
        message_dict(message)
        for message in (
            ChatMessage("user", f"Read probe {index}."),
            ChatMessage("assistant", "", tool_calls=(call,)),
            ChatMessage("tool", "probe log: " + "steady; " * 110, tool_call_id=call.id),
            ChatMessage("assistant", "Read."),
        )
    )
    return TranscriptWrite("append", messages, base=index, revision=index + 1)


async def round_trips(bus: str, calls: int) -> dict[str, list[float]]:
    """Per-call seconds of each way, interleaved in rounds so load hits all alike."""
    samples: dict[str, list[float]] = {
        "direct": [],
        "ask": [],
        "tool": [],
        "streamed": [],
        "first_chunk": [],
        "chunks": [],
        "journal": [],
        "memory": [],
    }
    tool = remote_tool("bench", "echo", description="Return the text.", timeout_s=10)
    chunked = remote_tool("bench", "chunks", description="Four chunks.", timeout_s=10)
    stores = {name: TranscriptTopics.of(f"bench-{name}") for name in ("journal", "memory")}
    participant = f"bench-{time.monotonic_ns()}"
    async with AgentRuntime(bus, name="bench-tools-caller") as runtime:
        for _ in range(50):  # warm up every path
            await tool.call(runtime, ARGS, call_id="w")
            await runtime.ask(PING, Ping("x"), reply_type=str)
        clock = time.perf_counter
        first: list[float] = []

        def on_first(chunk: str) -> None:
            if not first:
                first.append(clock())

        for index in range(calls):
            start = clock()
            await ECHO.invoke(ARGS)
            samples["direct"].append(clock() - start)
            start = clock()
            await runtime.ask(PING, Ping("bench reading 42"), reply_type=str)
            samples["ask"].append(clock() - start)
            start = clock()
            await tool.call(runtime, ARGS, call_id=f"c{index}")
            samples["tool"].append(clock() - start)
            start = clock()
            await tool.call(runtime, ARGS, call_id=f"s{index}", on_chunk=on_first)
            samples["streamed"].append(clock() - start)
            first.clear()
            start = clock()
            await chunked.call(runtime, ARGS, call_id=f"k{index}", on_chunk=on_first)
            samples["chunks"].append(clock() - start)
            samples["first_chunk"].append(first[0] - start)
            first.clear()
            for name, topics in stores.items():
                start = clock()
                ack = await runtime.ask(
                    topics.write,
                    _turn_write(index),
                    reply_type=TranscriptAck,
                    participant_id=participant,
                    timeout=10,
                )
                samples[name].append(clock() - start)
                assert ack.applied and ack.journaled == (name == "journal"), ack
    return samples


def tier1_cost(results: int, budget_s: float = 0.2) -> float:
    """Microseconds per reclaimed result of one tier-1 pass (keep 12) over ``results``."""
    built = [ChatMessage("user", "Read every probe.")]
    for index in range(results):
        built.append(
            ChatMessage("assistant", "", tool_calls=(ToolCall(f"c{index}", "probe", "{}"),))
        )
        built.append(ChatMessage("tool", f"probe {index}: " + "x" * 2048, tool_call_id=f"c{index}"))
    messages: list[Any] = [message_dict(message) for message in built]
    rounds, elapsed, reclaimed = 0, 0.0, 0
    while elapsed < budget_s or rounds < 3:
        start = time.perf_counter()
        done = compact_toolcall(messages, 12)
        elapsed += time.perf_counter() - start
        reclaimed += done.result.reclaimed_count
        rounds += 1
    return elapsed / reclaimed * 1e6


def _session_model() -> ScriptedLLM:
    def respond(request: ChatRequest) -> ScriptedResponse:
        tokens = sum(len(m.content) for m in request.messages) // 4
        if "Summarize the earlier part" in request.messages[0].content:
            return ScriptedResponse(
                "Probes read in order, all nominal.", usage=Usage(total_tokens=tokens)
            )
        if request.messages[-1].role == "tool":
            return ScriptedResponse("Read.", usage=Usage(total_tokens=tokens))
        call = ToolCall(f"r{len(request.messages)}-{tokens}", "probe", "{}")
        return ScriptedResponse(tool_calls=(call,), usage=Usage(total_tokens=tokens))

    return ScriptedLLM(default=respond)


async def session_memory(calls: int, every: int) -> tuple[list[float], list[float]]:
    """(calls so far, traced KiB) every ``every`` calls of one ToolAgent session."""
    import msgspec

    class Nothing(msgspec.Struct):
        pass

    probe = Tool("probe", "Read a probe.", Nothing, lambda args: "probe log: " + "steady; " * 250)
    xs: list[float] = []
    ys: list[float] = []
    llm = _session_model()
    async with AgentRuntime() as runtime:
        agent = ToolAgent(
            llm,
            context=_NoContext(),
            runtime=runtime,
            output_topic=VOICE_OUTPUT_TOPIC,
            tools=[probe],
            compactor=AutoCompactor(token_threshold=20_000),
        )
        agent.transcript("p1").originals_budget_chars = 40_000
        tracemalloc.start()
        try:
            for index in range(1, calls + 1):
                await agent.answer(
                    AgentTurn("p1", f"t{index}", f"Read probe {index}."), started=_started
                )
                if index % every == 0:
                    # the scripted model's request log is the test's, not the agent's
                    llm.requests.clear()
                    gc.collect()
                    xs.append(index)
                    ys.append(tracemalloc.get_traced_memory()[0] / 1024)
        finally:
            tracemalloc.stop()
    return xs, ys


class _NoContext:
    def blocks(self, participant_id: str) -> tuple:
        return ()

    def record_exchange(self, *args: object, **kwargs: object) -> None:
        return None

    def reconcile_history(self, *args: object, **kwargs: object) -> None:
        return None

    async def retract_exchange(self, *args: object, **kwargs: object) -> None:
        return None


async def _started() -> None:
    return None


def run_suite(ctx: SuiteContext) -> SuiteResult:
    calls = 100 if ctx.quick else 2_000
    p50: dict[str, list[float]] = {}
    with broker() as (bus, _), tempfile.TemporaryDirectory(prefix="xrmq-bench-tools-") as state:
        worker = Worker("tools", "-m", "bench.tools_workers", bus, state)
        try:
            worker.expect("ready")
            for rep in range(ctx.repetitions):
                ctx.progress(
                    f"tools: repetition {rep + 1}/{ctx.repetitions}: {calls} round trips of each "
                    "kind"
                )
                samples = run(round_trips(bus, calls))
                for name, values in samples.items():
                    p50.setdefault(name, []).append(percentile(values, 0.5) * 1e6)
        finally:
            worker.close()
    ask, tool = p50["ask"], p50["tool"]
    group = "tool call round trip p50, cross-process (shared cores)"
    rows = [
        _row(group, "direct call (Tool.invoke)", "us", p50["direct"]),
        _row(group, "bus ask", "us", ask),
        _row(group, "remote tool call", "us", tool, ratio_to_ask=median(tool) / median(ask)),
        _row(
            group,
            "remote tool call, streamed (ask_stream)",
            "us",
            p50["streamed"],
            ratio_to_call=median(p50["streamed"]) / median(tool),
        ),
        _row(group, "generator tool (4 chunks): first chunk", "us", p50["first_chunk"]),
        _row(group, "generator tool (4 chunks): result", "us", p50["chunks"]),
    ]
    journal, memory = p50["journal"], p50["memory"]
    rows += [
        _row("transcript write acknowledged p50 (one tool turn, 1 KB)", "in memory", "us", memory),
        _row(
            "transcript write acknowledged p50 (one tool turn, 1 KB)",
            "journaled (SQLite WAL)",
            "us",
            journal,
            ratio_to_memory=median(journal) / median(memory),
        ),
    ]
    for size in (100, 1_000):
        costs = [tier1_cost(size, 0.02 if ctx.quick else 0.2) for _ in range(ctx.repetitions)]
        rows.append(
            _row(
                "tier-1 compaction cost per reclaimed result",
                f"{size} tool results of 2 KB",
                "us",
                costs,
            )
        )
    session_calls = 100 if ctx.quick else 1_000
    ctx.progress(f"tools: a {session_calls}-call ToolAgent session")
    xs, ys = asyncio.run(session_memory(session_calls, session_calls // (10 if ctx.quick else 50)))
    third = len(ys) // 3
    first, second = max(ys[third : 2 * third]), max(ys[2 * third :])
    rows.append(
        Row(
            group="ToolAgent session memory (tracemalloc)",
            subject=f"peak, {session_calls} calls",
            unit="KiB",
            median=second,
            repetitions=[second] * ctx.repetitions,
            higher_is_better=False,
            extra={"peak_middle_third": first, "growth_ratio": second / first},
        )
    )
    return SuiteResult(
        rows=rows,
        bars=[
            bar(
                "session memory: peak of the last third / of the middle third",
                second / first,
                "<=",
                1.25,
                "flat: compaction and the originals' bound keep the transcript's size (it "
                "saw-tooths "
                "between compactions)",
            )
        ],
        series=[
            Series(name="ToolAgent session memory", x_label="tool calls", y_label="KiB", x=xs, y=ys)
        ],
        notes=[
            "The remote tool call is an ask plus a task per call at the server (DEFERRED_REPLY)."
        ],
    )


SUITE = Suite("tools", "Tools: tool call round trip, tier-1 cost, session memory", run_suite)
