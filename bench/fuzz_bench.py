"""Fuzz suite: adversarial frames at a running edge box, then turns (issue 13).

``xrmq up examples/edge-box.toml`` on a private runtime directory (every process its
own OS process). Each repetition a raw pyzmq process (``fuzz_frames``) sends N messages,
a round-robin mix of every category (random 1-5 frame messages, garbage metadata,
wrong-schema payloads, deeply nested MessagePack, invalid UTF-8, mismatched and empty
participants, a bad ``reply_to``, out-of-range seq and epoch, one oversize frame), and
then participants that never appeared before publish a note and ask about it (what
``xrmq publish`` and ``xrmq say`` do, from this process): a turn that needs the whole
path, context section, router, conversation, voice output. ``--quick`` runs every role
in one process of a small config (a stack starts in seconds).

Reported: turns answered after the fuzz (bar: all), dead actors (processes that died
or restarted, and mailbox tasks that ended; bar: 0), what the runtimes rejected per
category (summed over the processes) and the broker's dropped connections (the
oversize frames), and each process's resident memory after the last repetition with
its growth since before the first.
"""

from __future__ import annotations

import asyncio
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from xrmq.actors.edge.replies import ReplyCollector, ask
from xrmq.actors.runtime import Agent, AgentRuntime, subscribe
from xrmq.actors.runtime import run as run_loop
from xrmq.actors.runtime.edge_checks import REJECT_CATEGORIES
from xrmq.schemas import ConversationContextUpdate, RuntimeMetrics
from xrmq.topics import METRICS_TOPIC, context_topic

from . import fuzz_frames
from .procs import ROOT, Worker
from .stats import median
from .suite import Row, Suite, SuiteContext, SuiteResult, bar

CONFIG = ROOT / "examples" / "edge-box.toml"
QUICK_CONFIG = """
[bus]
address = "default"
capture = false
[context.topics.scene]
mode = "summary"
[context.topics.notes]
mode = "incremental"
[router]
decisions = "first"
default = "conversation"
[destinations.conversation]
description = "General assistant"
[supervisor]
metrics_interval_s = 0.25
[processes.box]
roles = ["context", "compaction", "conversation", "router", "renderer"]
"""
"""--quick: every role in one process (seconds to start on a loaded machine, not tens)."""
NOTES = context_topic("notes")
NOTE = "The kettle in lab 3 is set to 85 degrees."
QUESTION = "What is the kettle in lab 3 set to?"


class MetricsWatch(Agent):
    """The latest heartbeat of every runtime on the bus."""

    def __init__(self) -> None:
        self.latest: dict[str, RuntimeMetrics] = {}
        self.changed = asyncio.Event()

    @subscribe(METRICS_TOPIC)
    async def on_metrics(self, message: RuntimeMetrics, ctx) -> None:
        self.latest[message.runtime] = message
        self.changed.set()

    async def fresh(self, names: list[str], timeout: float = 30.0) -> dict[str, RuntimeMetrics]:
        """A heartbeat of each of ``names`` sent after this call."""
        since = time.time_ns() // 1000
        deadline = time.monotonic() + timeout
        while not all(
            name in self.latest and self.latest[name].timestamp_us > since for name in names
        ):
            self.changed.clear()
            await asyncio.wait_for(self.changed.wait(), max(0.01, deadline - time.monotonic()))
        return {name: self.latest[name] for name in names}


class Stack:
    """``xrmq up`` on a private runtime directory."""

    def __init__(self, quick: bool) -> None:
        self.directory = Path(tempfile.mkdtemp(prefix="xrmq-fuzz-"))
        os.chmod(self.directory, 0o700)
        self.bus = f"ipc://{self.directory}/default"
        config = CONFIG
        if quick:
            config = self.directory / "box.toml"
            config.write_text(QUICK_CONFIG)
        self.up = Worker(
            "xrmq up",
            "-m",
            "xrmq.actors.cli",
            "up",
            str(config),
            env={"XRMQ_RUNTIME_DIR": str(self.directory)},
        )
        ready = self.up.expect("xrmq up: ready", timeout=120)
        self.pids = {name: int(pid) for name, pid in re.findall(r"(\S+)=(\d+)", ready)}
        self.processes = [name for name in self.pids if name != "bus"]

    def rss_mib(self) -> dict[str, float]:
        sizes = {}
        for name, pid in self.pids.items():
            try:
                with open(f"/proc/{pid}/statm") as statm:
                    sizes[name] = int(statm.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20
            except FileNotFoundError:
                sizes[name] = 0.0
        return sizes

    def alive(self) -> int:
        return sum(Path(f"/proc/{pid}").exists() for pid in self.pids.values())

    def close(self) -> None:
        self.up.close()
        shutil.rmtree(self.directory, ignore_errors=True)


def fuzz(bus: str, count: int, seed: int) -> dict[str, int]:
    """``fuzz_frames`` in a process of its own (raw pyzmq, no xrmq)."""
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "bench.fuzz_frames",
            "--bus",
            bus,
            "--count",
            str(count),
            "--seed",
            str(seed),
        ],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=300,
        check=True,
    )
    return json.loads(done.stdout.removeprefix("fuzz: sent "))


async def measure(ctx: SuiteContext, stack: Stack, count: int, turns: int) -> dict[str, Any]:
    processes = stack.processes
    watch, collector = MetricsWatch(), ReplyCollector()
    client = AgentRuntime(stack.bus, name="fuzz-bench-client")
    client.register("watch", watch)
    client.register("replies", collector)
    figures: dict[str, Any] = {
        "answered": [],
        "quoted": [],
        "dead": [],
        "rejected": {},
        "dropped": [],
    }
    async with client:
        previous = await watch.fresh([*processes, "broker"])
        figures["rss_before"] = stack.rss_mib()
        for rep in range(ctx.repetitions):
            sent = await asyncio.to_thread(fuzz, stack.bus, count, rep)
            ok = quoted = 0
            for index in range(turns):
                participant = f"fz{rep}-{index}"
                await client.publish(
                    NOTES, ConversationContextUpdate(NOTE), participant_id=participant
                )
                turn = ask(client, collector, participant, QUESTION)
                try:
                    await turn.wait(30)
                except TimeoutError:
                    continue
                ok += 1  # a complete answer
                quoted += "85" in turn.spoken  # the note had reached the context in time
            now = await watch.fresh([*processes, "broker"])
            figures["answered"].append(ok / turns)
            figures["quoted"].append(quoted / turns)
            died = len(stack.pids) - stack.alive()
            restarted = sum(now[name].epoch != previous[name].epoch for name in processes)
            mailbox_restarts = sum(
                now[name].actor_restarts - previous[name].actor_restarts for name in processes
            )
            figures["dead"].append(float(died + restarted + mailbox_restarts))
            for category in REJECT_CATEGORIES:
                total = sum(
                    now[name].rejected_by.get(category, 0)
                    - previous[name].rejected_by.get(category, 0)
                    for name in processes
                )
                figures["rejected"].setdefault(category, []).append(float(total))
            figures["dropped"].append(
                now["broker"].gauges["broker.publishers_dropped"]
                - previous["broker"].gauges["broker.publishers_dropped"]
            )
            previous = now
            ctx.progress(
                f"fuzz: rep {rep + 1}/{ctx.repetitions} sent {sum(sent.values())}, "
                f"answered {ok}/{turns} ({quoted} quoting the note), "
                f"dead {figures['dead'][-1]:.0f}"
            )
        figures["rss_after"] = stack.rss_mib()
    return figures


def run(ctx: SuiteContext) -> SuiteResult:
    count = len(fuzz_frames.CATEGORIES) * (20 if ctx.quick else 500)
    turns = 1 if ctx.quick else 4
    stack = Stack(ctx.quick)
    try:
        ctx.progress(
            f"fuzz: stack up ({len(stack.processes)} processes); {count} fuzz messages and "
            f"{turns} turns "
            f"per repetition"
        )
        figures = run_loop(measure(ctx, stack, count, turns))
    finally:
        stack.close()
    answered, dead, rejected, dropped = (
        figures["answered"],
        figures["dead"],
        figures["rejected"],
        figures["dropped"],
    )
    rss_before, rss_after = figures["rss_before"], figures["rss_after"]
    processes = stack.processes
    group = "fuzz at a running edge box"
    result_rows = [
        Row(
            group=group,
            subject="turns answered after the fuzz",
            unit="fraction",
            median=max(median(answered), 1e-9),
            repetitions=answered,
            higher_is_better=True,
            extra={"quoting the note just published": median(figures["quoted"])},
        ),
    ]
    notes = [
        f"{count} fuzz messages per repetition, a round-robin mix of "
        f"{len(fuzz_frames.CATEGORIES)} categories "
        f"({', '.join(fuzz_frames.CATEGORIES)}); {turns} turns of new participants after each"
    ]
    for category, values in rejected.items():
        if median(values) > 0:
            result_rows.append(
                Row(
                    group="fuzz: rejected by the runtimes, per category",
                    subject=category,
                    unit="messages",
                    median=median(values),
                    repetitions=values,
                    higher_is_better=True,
                )
            )
        else:
            notes.append(f"category {category!r}: nothing rejected under it")
    if median(dropped) > 0:
        result_rows.append(
            Row(
                group="fuzz: rejected by the runtimes, per category",
                subject="oversize (broker)",
                unit="connections dropped",
                median=median(dropped),
                repetitions=dropped,
                higher_is_better=True,
            )
        )
    for name in processes:
        result_rows.append(
            Row(
                group="fuzz: resident memory after",
                subject=name,
                unit="MiB",
                median=max(rss_after[name], 1e-9),
                repetitions=[rss_after[name]] * ctx.repetitions,
                higher_is_better=False,
                extra={"growth MiB": rss_after[name] - rss_before[name]},
            )
        )
    bars = [
        bar(
            "dead actors after the fuzz",
            median(dead),
            "<=",
            0,
            "processes died or restarted, mailbox tasks ended",
        ),
        bar("turns answered after the fuzz", median(answered), ">=", 1.0, "all"),
    ]
    return SuiteResult(rows=result_rows, bars=bars, notes=notes)


SUITE = Suite("fuzz", "Fuzz: adversarial frames at a running edge box, then turns", run)
