"""A context replica at full scale (issue 30 items 1 and 2), measured once.

``python -m bench.replica_scale [--participants N] [--quick]``

One process: a local ``ContextManager`` (section host and replica on one runtime, whose
``max_message_bytes`` bounds every reply as on the bus) with the default replica bound
(4,096 participants) and N participants (default 124,000, the red-team run's count) with
one note each. It reports:

- the bytes one ``HostViews`` of every participant would take (the snapshot a host sent
  before snapshots were paged; over 4 MiB it was refused, so no replica resynced);
- a paged resync of the host: pages and seconds;
- ``ensure`` of participants the replica evicted (their notes fetched from the host):
  median and p99 over 200 distinct participants, and whether each came back whole.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import time

import msgspec

from xrmq.actors.context import ContextManager
from xrmq.actors.context.messages import HostViews
from xrmq.actors.models import OfflineLLM
from xrmq.actors.runtime import AgentRuntime
from xrmq.schemas import ConversationContextUpdate


def note(index: int) -> str:
    return f"The spare battery of p{index} is in cabinet C{index}-7, second shelf from the top."


async def measure(participants: int) -> dict[str, float]:
    runtime = AgentRuntime(name="replica-scale")
    context = ContextManager(
        OfflineLLM(), incremental_context_topics=["notes"], summary_context_topics=["scene"]
    )
    runtime.register("context", context.subscriber())
    async with runtime:
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
        host = context.host
        assert host is not None  # local: attached at registration
        whole = HostViews(0, runtime.epoch, tuple(host.views()))
        snapshot_bytes = len(msgspec.msgpack.encode(whole))

        resyncs = context.resyncs
        started = time.perf_counter()
        await context._resync(0)
        resync_s = time.perf_counter() - started
        assert context.resyncs == resyncs + 1, "the paged resync did not complete"

        evicted = [f"p{i}" for i in range(200) if context.blocks(f"p{i}") == ()]
        latencies, back = [], 0
        for pid in evicted:
            started = time.perf_counter()
            await context.ensure(pid)
            latencies.append((time.perf_counter() - started) * 1000)
            back += any(note(int(pid[1:])) in block.text for block in context.blocks(pid))
        latencies.sort()
        return {
            "participants": participants,
            "write_s": round(written, 1),
            "snapshot_mib": round(snapshot_bytes / 2**20, 1),
            "limit_mib": runtime.max_message_bytes / 2**20,
            "resync_s": round(resync_s, 2),
            "evicted_fetched": len(evicted),
            "fetched_whole": back,
            "ensure_p50_ms": round(statistics.median(latencies), 2) if latencies else 0.0,
            "ensure_p99_ms": round(latencies[int(len(latencies) * 0.99)], 2) if latencies else 0.0,
        }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--participants", type=int, default=124_000)
    parser.add_argument("--quick", action="store_true", help="20,000 participants")
    args = parser.parse_args()
    if args.participants < 1:
        raise SystemExit("--participants: must be >= 1")
    print(asyncio.run(measure(20_000 if args.quick else args.participants)), flush=True)


if __name__ == "__main__":
    main()
