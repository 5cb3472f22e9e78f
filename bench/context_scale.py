"""Context memory, journal and restart at full scale (issue 30 item 3), measured once.

``python -m bench.context_scale [--participants N] [--flood-s S] [--quick] [--dialogues]``

Each phase runs in a process of its own (so its RSS is its own), with a journal in a
temporary directory:

- fill: a local ``ContextManager`` with a journal (section hosts and replica in one
  process, as ``xrmq up`` runs the context process) writes one note for each of N
  participants (default 100,000); it reports the process RSS before and after, the
  journal's size (checkpointed) and how many participants the topic host holds in
  memory;
- restart: a fresh process opens that journal and hosts its sections
  (``register_sections``), as a restarted context process does: seconds from opening
  the journal to ready, RSS at ready, and the participants loaded into memory;
- flood: 3 participants' notes written as fast as the manager takes them for S seconds
  (default 20): RSS before/after, notes written, journal size;
- dialogues (``--dialogues``, instead of the phases above): the fill and the restart with
  one recorded exchange (a dialogue) for each of N participants instead of a note: the
  restart's time, RSS and dialogue actors live at ready.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path


def rss_mib() -> float:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return round(int(line.split()[1]) / 1024, 1)
    return 0.0


def note(index: int) -> str:
    return f"The spare battery of p{index} is in cabinet C{index}-7, second shelf from the top."


def _manager(path: str):
    from xrmq.actors.context import ContextManager
    from xrmq.actors.models import OfflineLLM

    return ContextManager(OfflineLLM(), store=path, incremental_context_topics=["notes"])


def _held(context) -> int:
    host = context.host
    return sum(len(topic.host.participants) for topic in host.topics) if host else -1


async def fill(path: str, participants: int) -> dict:
    from xrmq.actors.runtime import AgentRuntime
    from xrmq.schemas import ConversationContextUpdate

    runtime = AgentRuntime(name="context-scale")
    context = _manager(path)
    runtime.register("context", context.subscriber())
    async with runtime:
        before = rss_mib()
        started = time.perf_counter()
        for start in range(0, participants, 500):
            await asyncio.gather(
                *(
                    context.update(
                        f"p{i}", "notes", ConversationContextUpdate(note(i)), mode="incremental"
                    )
                    for i in range(start, min(participants, start + 500))
                )
            )
        await context.synced()
        written = time.perf_counter() - started
        after = rss_mib()
        held = _held(context)
        started = time.perf_counter()
        await context._resync(0)
        resync = time.perf_counter() - started
        assert context.store is not None
        await context.store.barrier()
        context.store.checkpoint()
        journal = context.store.size_bytes()
    return {
        "participants": participants,
        "write_s": round(written, 1),
        "rss_before_mib": before,
        "rss_after_mib": after,
        "journal_mib": round(journal / 2**20, 1),
        "held_in_memory": held,
        "paged_resync_s": round(resync, 2),
    }


async def fill_dialogues(path: str, participants: int) -> dict:
    from xrmq.actors.runtime import AgentRuntime

    runtime = AgentRuntime(name="context-scale-dialogues")
    context = _manager(path)
    runtime.register("context", context.subscriber())
    async with runtime:
        before = rss_mib()
        started = time.perf_counter()
        for start in range(0, participants, 500):
            for i in range(start, min(participants, start + 500)):
                context.record_exchange(
                    f"p{i}",
                    f"Where is the spare battery of p{i}?",
                    note(i),
                    timestamp_us=1_714_572_785_000_000 + i,
                    exchange_id=f"p{i}-0",
                )
            await context.synced()
        written = time.perf_counter() - started
        after = rss_mib()
        assert context.store is not None
        await context.store.barrier()
        context.store.checkpoint()
        journal = context.store.size_bytes()
    return {
        "participants": participants,
        "write_s": round(written, 1),
        "rss_before_mib": before,
        "rss_after_mib": after,
        "journal_mib": round(journal / 2**20, 1),
    }


async def restart(path: str) -> dict:
    from xrmq.actors.context import context_plan, register_sections
    from xrmq.actors.context.store import open_store
    from xrmq.actors.runtime import AgentRuntime

    try:  # as a context process opens its journal (every section read on demand)
        from xrmq.actors.context.journal import ON_DEMAND_ALL

        lazy = {"on_demand_prefix": ON_DEMAND_ALL}
    except ImportError:
        try:  # before: dialogues read whole, topic sections on demand
            from xrmq.actors.context.journal import TOPIC_JOURNAL_PREFIX

            lazy = {"on_demand_prefix": TOPIC_JOURNAL_PREFIX}
        except ImportError:  # before issue 30 item 3: read whole
            lazy = {}
    before = rss_mib()
    started = time.perf_counter()
    runtime = AgentRuntime(name="context-scale-restart")
    host = register_sections(
        runtime,
        context_plan(incremental_context_topics=["notes"]),
        store=open_store(path, **lazy),  # type: ignore[arg-type]
    )
    await runtime.start()
    ready = time.perf_counter() - started
    loaded = sum(len(topic.host.participants) for topic in host.topics)
    result = {
        "open_to_ready_s": round(ready, 2),
        "rss_before_mib": before,
        "rss_ready_mib": rss_mib(),
        "loaded_at_ready": loaded,
        "dialogue_actors_at_ready": len(runtime.keyed_instances("context.dialogue")),
    }
    await runtime.stop()
    return result


async def flood(path: str, seconds: float) -> dict:
    from xrmq.actors.runtime import AgentRuntime
    from xrmq.schemas import ConversationContextUpdate

    runtime = AgentRuntime(name="context-scale-flood")
    context = _manager(path)
    runtime.register("context", context.subscriber())
    async with runtime:
        before = rss_mib()
        written, end = 0, time.perf_counter() + seconds
        while time.perf_counter() < end:
            await asyncio.gather(
                *(
                    context.update(
                        f"f{p}",
                        "notes",
                        ConversationContextUpdate(f"{note(written + i)} flood {written + i}"),
                        mode="incremental",
                    )
                    for i in range(100)
                    for p in range(3)
                )
            )
            written += 100
        await context.synced()
        after = rss_mib()
        assert context.store is not None
        await context.store.barrier()
        context.store.checkpoint()
        journal = context.store.size_bytes()
    return {
        "seconds": seconds,
        "notes_written": written * 3,
        "rss_before_mib": before,
        "rss_after_mib": after,
        "journal_mib": round(journal / 2**20, 2),
    }


def _phase(*args: str) -> dict:
    out = subprocess.run(
        [sys.executable, "-m", "bench.context_scale", "--phase", *args],
        check=True,
        capture_output=True,
        text=True,
    ).stdout
    return json.loads(out.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--participants", type=int, default=100_000)
    parser.add_argument("--flood-s", type=float, default=20.0)
    parser.add_argument("--quick", action="store_true", help="5,000 participants, 3 s flood")
    parser.add_argument(
        "--dialogues", action="store_true", help="fill and restart with one dialogue each"
    )
    parser.add_argument("--phase", nargs="+", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.phase:
        name, path, *rest = args.phase
        if name == "fill":
            result = asyncio.run(fill(path, int(rest[0])))
        elif name == "fill-dialogues":
            result = asyncio.run(fill_dialogues(path, int(rest[0])))
        elif name == "restart":
            result = asyncio.run(restart(path))
        else:
            result = asyncio.run(flood(path, float(rest[0])))
        print(json.dumps(result), flush=True)
        return
    if args.participants < 1:
        raise SystemExit("--participants: must be >= 1")
    if args.flood_s <= 0:
        raise SystemExit("--flood-s: must be > 0")
    participants = 5_000 if args.quick else args.participants
    seconds = 3.0 if args.quick else args.flood_s
    with tempfile.TemporaryDirectory(prefix="context-scale-") as directory:
        journal = os.path.join(directory, "scale.sqlite3")
        if args.dialogues:
            print("fill", _phase("fill-dialogues", journal, str(participants)), flush=True)
            print("restart", _phase("restart", journal), flush=True)
            return
        print("fill", _phase("fill", journal, str(participants)), flush=True)
        print("restart", _phase("restart", journal), flush=True)
        print("flood", _phase("flood", os.path.join(directory, "flood.sqlite3"), str(seconds)))


if __name__ == "__main__":
    main()
