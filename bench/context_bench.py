"""Context benchmarks: blocks() time, memory per participant, topic-actor update throughput.

``python -m bench.context_bench [--quick]``

- ``blocks()`` at full budgets (defaults: dialogue 8,000 bytes, two topics of 4,000):
  every section holds a little more than its budget, rendered at its budget; measured with the
  replica in sync and with one unacknowledged exchange in the local overlay.
- Memory per participant at full budgets (sections, replica and bus buffers of 200
  participants, tracemalloc) and of one participant over a 10,000-exchange session with
  compaction by ``OfflineLLM`` (zero delays), sampled every 1,000 exchanges.
- Update throughput of one topic actor fed by a sensor in another process through a
  broker process: updates applied per second, from the sensor's first publish to the
  view of its last update in the manager's replica.
- The journal (issue 15): its bytes per participant at full budgets, its growth over
  the 10,000-exchange session (checkpointed, so the figure is the database itself),
  and the recovery of a context process with 50 participants at full budgets: from
  spawning the process to its runtime being ready with every section restored.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import tracemalloc
from typing import Any

from xrmq.actors.context import ContextManager
from xrmq.actors.models import OfflineLLM, ScriptedLLM, ScriptedResponse
from xrmq.actors.runtime import AgentRuntime
from xrmq.schemas import ConversationContextUpdate

T0 = 1_714_572_785_000_000
TOPICS: dict[str, Any] = {
    "summary_context_topics": ("sample.monitor-window",),
    "incremental_context_topics": ("sample.notes",),
}


async def fill(context: ContextManager, participant: str, exchanges: int = 45) -> None:
    """Fill every section of ``participant`` just past its budget (the model hangs, so
    nothing is compacted): 45 exchanges of 190 bytes, 32 notes of 130, one 6 KB state."""
    for i in range(exchanges):
        context.record_exchange(
            participant,
            f"question {i} " + "q" * 60,
            "answer " + "a" * 80,
            timestamp_us=T0 + i,
            exchange_id=i,
        )
    for i in range(32):
        await context.update(
            participant,
            "sample.notes",
            ConversationContextUpdate(f"note {i} " + "n" * 90),
            mode="incremental",
            timestamp_us=T0 + i,
        )
    await context.update(
        participant,
        "sample.monitor-window",
        ConversationContextUpdate("w" * 6000),
        mode="summary",
        timestamp_us=T0,
    )
    await context.synced()


def percentiles(samples: list[float]) -> tuple[float, float]:
    samples = sorted(samples)
    return statistics.median(samples), samples[int(len(samples) * 0.99)]


async def bench_blocks(iterations: int) -> dict:
    llm = ScriptedLLM(default=ScriptedResponse(hang=True))
    runtime = AgentRuntime()
    context = ContextManager(llm, **TOPICS)
    runtime.register("context", context.subscriber())
    async with runtime:
        await fill(context, "p1")
        size = sum(len(block.text.encode()) for block in context.blocks("p1"))
        results: dict[str, Any] = {"rendered_bytes": size, "blocks": len(context.blocks("p1"))}
        for label in ("synced", "overlay"):
            if label == "overlay":
                context.record_exchange(
                    "p1", "unacknowledged", "yet", timestamp_us=T0 + 10_000, exchange_id="new"
                )
            samples = []
            for _ in range(iterations):
                start = time.perf_counter_ns()
                context.blocks("p1")
                samples.append((time.perf_counter_ns() - start) / 1000)
            results[label] = percentiles(samples)
        await context.close()
    return results


async def bench_memory_full(participants: int) -> float:
    llm = ScriptedLLM(default=ScriptedResponse(hang=True))
    runtime = AgentRuntime()
    context = ContextManager(llm, **TOPICS)
    runtime.register("context", context.subscriber())
    async with runtime:
        await fill(context, "warmup")
        gc.collect()
        tracemalloc.start()
        before = tracemalloc.get_traced_memory()[0]
        for i in range(participants):
            await fill(context, f"p{i}")
        gc.collect()
        after = tracemalloc.get_traced_memory()[0]
        tracemalloc.stop()
        await context.close()
    return (after - before) / participants


async def bench_long_session(exchanges: int, every: int) -> list[tuple[int, int, int]]:
    """(exchanges, traced bytes for the participant, identities) every ``every`` exchanges."""
    llm = OfflineLLM(time_to_first_token_s=0, tokens_per_second=0)
    runtime = AgentRuntime()
    context = ContextManager(llm, **TOPICS)
    runtime.register("context", context.subscriber())
    samples = []
    async with runtime:
        gc.collect()
        tracemalloc.start()
        base = tracemalloc.get_traced_memory()[0]
        for i in range(exchanges):
            context.record_exchange(
                "p1",
                f"question {i} about bay {i % 7}",
                f"answer {i}: " + "a" * 120,
                timestamp_us=T0 + i * 1_000_000,
                exchange_id=f"turn-{i}",
            )
            if (i + 1) % 20 == 0:  # a session's turns are seconds apart: compaction keeps up
                await settle(runtime, context, "p1")
            if (i + 1) % every == 0:
                await context.synced()
                gc.collect()
                samples.append(
                    (
                        i + 1,
                        tracemalloc.get_traced_memory()[0] - base,
                        len(context._replicas["p1"].identities),
                    )
                )
        tracemalloc.stop()
        await context.close()
    return samples


async def bench_journal_full(participants: int, directory: str) -> float:
    """Journal bytes per participant at full budgets (checkpointed database file)."""
    llm = ScriptedLLM(default=ScriptedResponse(hang=True))
    runtime = AgentRuntime()
    context = ContextManager(llm, store=tempfile.mktemp(".sqlite3", "full-", directory), **TOPICS)
    runtime.register("context", context.subscriber())
    store = context.store
    assert store is not None  # made with a store
    async with runtime:
        await fill(context, "warmup")
        store.checkpoint()
        before = store.size_bytes()
        for i in range(participants):
            await fill(context, f"p{i}")
        store.checkpoint()
        after = store.size_bytes()
        await context.close()
    return (after - before) / participants


async def bench_journal_session(
    exchanges: int, every: int, directory: str
) -> list[tuple[int, int]]:
    """(exchanges, journal bytes) of one participant's session, every ``every`` exchanges."""
    llm = OfflineLLM(time_to_first_token_s=0, tokens_per_second=0)
    runtime = AgentRuntime()
    context = ContextManager(
        llm, store=tempfile.mktemp(".sqlite3", "session-", directory), **TOPICS
    )
    runtime.register("context", context.subscriber())
    store = context.store
    assert store is not None  # made with a store
    samples = []
    async with runtime:
        for i in range(exchanges):
            context.record_exchange(
                "p1",
                f"question {i} about bay {i % 7}",
                f"answer {i}: " + "a" * 120,
                timestamp_us=T0 + i * 1_000_000,
                exchange_id=f"turn-{i}",
            )
            if (i + 1) % 20 == 0:
                await settle(runtime, context, "p1")
            if (i + 1) % every == 0:
                await context.synced()
                store.checkpoint()
                samples.append((i + 1, store.size_bytes()))
        await context.close()
    return samples


RECOVER = """
import asyncio, json, sys, time
from xrmq.actors.context import context_plan, register_sections
from xrmq.actors.context.store import open_store
from xrmq.actors.runtime import AgentRuntime
path, plan = sys.argv[1], context_plan(**json.loads(sys.argv[2]))
async def main():
    start = time.perf_counter()
    runtime = AgentRuntime(name="bench-recovery")
    register_sections(runtime, plan, store=open_store(path))
    await runtime.start()
    ready = time.perf_counter() - start
    dialogues = len(runtime.keyed_instances("context.dialogue"))
    print("ready " + json.dumps({"open_to_ready_s": ready, "dialogues": dialogues}), flush=True)
    await runtime.stop()
asyncio.run(main())
"""


async def bench_recovery(participants: int, directory: str) -> dict:
    """A context process restoring ``participants`` at full budgets: seconds from spawn to
    ready (and from opening the journal to ready, without the interpreter's start)."""
    path = tempfile.mktemp(".sqlite3", "recovery-", directory)  # a fresh journal per call
    llm = ScriptedLLM(default=ScriptedResponse(hang=True))
    runtime = AgentRuntime()
    context = ContextManager(llm, store=path, **TOPICS)
    runtime.register("context", context.subscriber())
    async with runtime:
        for i in range(participants):
            await fill(context, f"p{i}")
        expected = {f"p{i}": context.blocks(f"p{i}") for i in range(participants)}
    assert all(expected.values())
    empty = await _recover(tempfile.mktemp(".sqlite3", "empty-", directory))  # nothing to restore
    full = await _recover(path)
    if full["dialogues"] != participants:
        raise RuntimeError(f"recovery restored {full['dialogues']} of {participants} dialogues")
    return {
        **full,
        "empty_spawn_to_ready_s": empty["spawn_to_ready_s"],
        "empty_open_to_ready_s": empty["open_to_ready_s"],
        "journal_bytes": os.path.getsize(path),
    }


async def _recover(path: str) -> dict:
    plan = json.dumps({name: list(value) for name, value in TOPICS.items()})
    spawned = time.perf_counter()
    proc = subprocess.Popen(
        [sys.executable, "-c", RECOVER, path, plan],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        line = await asyncio.to_thread(_line, proc, "ready")
        wall = time.perf_counter() - spawned
    finally:
        proc.wait(timeout=30)
    return {"spawn_to_ready_s": wall, **json.loads(line.split(" ", 1)[1])}


async def settle(runtime: AgentRuntime, context: ContextManager, participant: str) -> None:
    """Wait until the participant's dialogue section has no compaction due or in flight."""
    await context.synced()
    dialogue: Any = runtime.keyed_instances("context.dialogue")[participant]  # its section actor
    host = dialogue.host
    state = host.participants[participant].state
    while (
        state.pending is not None
        or state.condense_due is not None
        or host.section.compaction_due(state)
    ):
        await context.changed()


SENSOR = """
import asyncio, sys, time
from xrmq.actors.runtime import AgentRuntime
from xrmq.schemas import ConversationContextUpdate
from xrmq.topics import context_topic
bus, count, participants = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
topic = context_topic("sample.notes")
async def main():
    async with AgentRuntime(bus, name="sensor") as runtime:
        print(f"start {time.time()}", flush=True)
        for i in range(count):
            await runtime.publish(topic, ConversationContextUpdate(f"u{i} " + "x" * 80),
                                  participant_id=f"p{i % participants}")
            if i % 256 == 255:
                await asyncio.sleep(0)
        print("published", flush=True)
asyncio.run(main())
"""


def _line(proc: subprocess.Popen, prefix: str) -> str:
    assert proc.stdout is not None  # started with stdout a pipe
    for line in proc.stdout:
        if line.startswith(prefix):
            return line.strip()
    stderr = proc.stderr.read()[-2000:] if proc.stderr is not None else "(not captured)"
    raise RuntimeError(f"process exited without {prefix!r}: {stderr}")


async def bench_throughput(count: int, participants: int) -> dict:
    directory = tempfile.mkdtemp(prefix="xrmq-bench-")
    bus = f"ipc://{directory}/bus"
    broker = subprocess.Popen(
        [sys.executable, "-m", "xrmq.actors.cli", "bus", "--bus", bus],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    sensor = None
    try:
        await asyncio.to_thread(_line, broker, "xrmq bus: ready")
        runtime = AgentRuntime(bus, name="bench-context")
        context = ContextManager(OfflineLLM(time_to_first_token_s=0, tokens_per_second=0), **TOPICS)
        runtime.register("context", context.subscriber())
        async with runtime:
            sensor = subprocess.Popen(
                [sys.executable, "-c", SENSOR, bus, str(count), str(participants)],
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                text=True,
            )
            started = float((await asyncio.to_thread(_line, sensor, "start")).split()[1])
            last = {f"p{i % participants}": f"u{i} " for i in range(count - participants, count)}

            def done() -> bool:
                return all(
                    any(
                        block.text.split("] ", 2)[-1].startswith(token)
                        for block in context.blocks(p)
                    )
                    for p, token in last.items()
                )

            while not done():
                await context.changed()
            elapsed = time.time() - started
            stats = runtime.metrics()
            await context.close()
        return {
            "updates": count,
            "seconds": elapsed,
            "per_second": count / elapsed,
            "gaps": stats.gaps,
            "overflow": stats.overflow,
        }
    finally:
        for proc in (sensor, broker):
            if proc is not None and proc.poll() is None:
                proc.terminate()
                proc.wait(timeout=10)
        shutil.rmtree(directory, ignore_errors=True)


async def main(quick: bool) -> None:
    blocks = await bench_blocks(1_000 if quick else 20_000)
    print(
        f"blocks() at full budgets ({blocks['blocks']} blocks, {blocks['rendered_bytes']} bytes): "
        f"synced p50 {blocks['synced'][0]:.1f} us p99 {blocks['synced'][1]:.1f} us; "
        f"with one pending exchange p50 {blocks['overlay'][0]:.1f} us p99 "
        f"{blocks['overlay'][1]:.1f} us"
    )
    per_participant = await bench_memory_full(20 if quick else 200)
    print(f"memory per participant at full budgets: {per_participant / 1024:.1f} KiB")
    for exchanges, traced, identities in await bench_long_session(
        1_000 if quick else 10_000, 100 if quick else 1_000
    ):
        print(
            f"  session after {exchanges:>6} exchanges: {traced / 1024:8.1f} KiB traced, "
            f"{identities} identities"
        )
    throughput = await bench_throughput(2_000 if quick else 50_000, 10)
    print(
        f"topic actor update throughput from a sensor process: {throughput['per_second']:,.0f} "
        "updates/s "
        f"({throughput['updates']} updates in {throughput['seconds']:.2f} s, gaps "
        f"{throughput['gaps']}, "
        f"overflow {throughput['overflow']})"
    )


if __name__ == "__main__":
    os.environ.setdefault("XRMQ_LOG_LEVEL", "ERROR")  # a benchmark's figures, not its logs
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="small sizes, for a smoke run")
    asyncio.run(main(parser.parse_args().quick))
