"""``xrmq demo``: the whole edge box at work, scripted, on a fresh machine.

It starts the built-in default stack (OfflineLLM, no keys, no network) as separate OS
processes through the ``xrmq up`` supervisor, on a private bus (``PrivateStack``),
with small context budgets so that compaction visibly runs. Then a scripted session:
two participants; a simulated sensor (a runtime of its own) publishing the summary
topic ``scene`` and the incremental topic ``notes``; turns that need a sensor fact, a
turn the tools destination answers by calling a camera process's tool, a follow-up
that needs earlier dialogue (a fact the participant stated turns before, by then
compacted into a summary), the context process killed with SIGKILL mid-session (the
supervisor restarts it, it restores every participant's context from its journal, and
the follow-ups still answer from it), an interruption mid-answer, and a participant
who leaves (their context is cleared: asked again after rejoining, nothing is known).

The voice output is printed as it plays by a ``VoiceRenderer`` in this process, with
each response's latency. The end summary gives the turns, first-chunk latency p50/p95
(from each ``UserQuery`` publish to the first reply fragment at this process's
subscriber), the compactions run (compaction results counted on the bus) and the gaps
(summed over every runtime's latest ``RuntimeMetrics`` and this process's runtimes).

Every wait is for something to happen (a readiness line, a section view carrying the
sensor's fact, a final frame, a metrics report), bounded by a timeout. Any failure (a
process that died, a turn without an answer in time, an expected fact missing, a gap)
ends the demo with exit code 1 and a message saying which.
"""

from __future__ import annotations

import asyncio
import math
import sys
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import TextIO, cast

import msgspec

from xrmq.actors.runtime import AgentRuntime
from xrmq.actors.voice import VoiceRenderer
from xrmq.schemas import ConversationContextUpdate, Interrupted, ParticipantLeft
from xrmq.topics import (
    INTERRUPTED_TOPIC,
    PARTICIPANT_LEFT_TOPIC,
    QUERY_TOPIC,
    context_topic,
)

from .config import DestinationConfig, EdgeConfig, ProcessConfig, RestartPolicyConfig
from .config_loader import default_config
from .demo_observers import DemoFailure, PrintingSink, StackObserver
from .private_stack import PrivateStack
from .replies import ReplyCollector, Turn, ask

KILLED = "context"
"""The process the demo kills mid-session."""

TURN_TIMEOUT_S = 10.0
"""The longest a scripted turn, a sensor update or the final metrics may take."""


def demo_config() -> EdgeConfig:
    """The built-in default with budgets small enough that a short session compacts.

    A section compacts once its uncompacted entries exceed half its budget: a few
    exchanges or notes. No process may crash: the first crash stops the stack
    (``on_give_up = "stop_box"``) and fails the demo. A camera process serves a tool,
    and a ``kind = "tools"`` destination takes the turns that name the bench or the
    camera (the router's keyword rules; everything else goes to the conversation).
    """
    base = default_config()
    context = msgspec.structs.replace(
        base.context,
        dialogue_budget_bytes=900,
        topic_budget_bytes=700,
        compaction_input_budget_bytes=1400,
    )
    supervisor = msgspec.structs.replace(
        base.supervisor,
        metrics_interval_s=0.25,
        ready_timeout_s=20.0,
        shutdown_timeout_s=5.0,
        restart=RestartPolicyConfig(max_crashes=1),
    )
    tools = DestinationConfig(
        description="Lab tools: looks at the bench through the camera.",
        kind="tools",
        keywords=["bench", "camera"],
        tool_servers=["camera"],
        tool_timeout_s=5.0,
    )
    processes = dict(base.processes)
    processes["camera"] = ProcessConfig(roles=["xrmq.actors.edge.demo_tools:camera_role"])
    processes["conversation"] = msgspec.structs.replace(
        processes["conversation"], after=["context", "camera"]
    )
    # Any crash fails the demo (stop_box); the context process is killed once on
    # purpose: it may be restarted once, at once.
    processes = {
        name: msgspec.structs.replace(spec, on_give_up="stop_box")
        for name, spec in processes.items()
    }
    processes[KILLED] = msgspec.structs.replace(
        processes[KILLED],
        restart=RestartPolicyConfig(max_crashes=2, backoff_initial_s=0.05, backoff_max_s=0.05),
    )
    return msgspec.structs.replace(
        base,
        context=context,
        supervisor=supervisor,
        processes=processes,
        destinations={**base.destinations, "lab-tools": tools},
        router=msgspec.structs.replace(base.router, decisions="rules"),
    )


# ---------------------------------------------------------------------------- the script


@dataclass(frozen=True)
class Step:
    """Print ``title`` as a heading."""

    title: str


@dataclass(frozen=True)
class Sense:
    """The sensor publishes ``text`` on ``topic`` for ``participant``; wait until the context holds
    it."""

    participant: str
    topic: str
    text: str


@dataclass(frozen=True)
class Ask:
    """``participant`` asks ``text``; the answer must contain ``expect`` and must not contain
    ``absent``."""

    participant: str
    text: str
    expect: str | None = None
    absent: str | None = None


@dataclass(frozen=True)
class Interrupt:
    """``participant`` asks ``text`` and barges in once the answer has started: it must be cut."""

    participant: str
    text: str


@dataclass(frozen=True)
class Kill:
    """SIGKILL ``process``; wait until the supervisor restarted it (from its journal)."""

    process: str


@dataclass(frozen=True)
class Leave:
    """``participant`` leaves: wait until the context process holds nothing of theirs."""

    participant: str


SENSOR_FACT = "85 degrees"
FOLLOW_UP_FACT = "drawer 12"
TOOL_FACT = "red multimeter"

SCRIPT: tuple[Step | Sense | Ask | Interrupt | Kill | Leave, ...] = (
    Step("the sensor reports the scene and a note"),
    Sense("alice", "scene", "Alice is at the workbench in lab 3 with the oscilloscope on."),
    Sense("bob", "scene", "Bob is at the loading dock next to pallet P-12."),
    Sense("alice", "notes", "The kettle in lab 3 is set to 85 degrees."),
    Step("both participants talk; alice asks about a sensor fact"),
    Ask("alice", "I left the spare key in drawer 12 of the blue cabinet."),
    Ask("bob", "My badge number is 4471, please remember it."),
    Ask("alice", "What temperature is the kettle set to?", expect=SENSOR_FACT),
    Step("alice asks about the bench: the tools destination calls the camera's tool"),
    Ask("alice", "What is on the bench right now?", expect=TOOL_FACT),
    Step("more notes arrive: enough for the notes section to compact"),
    Sense("alice", "notes", "The centrifuge in lab 3 was serviced on Monday by Dana Whitfield."),
    Sense("alice", "notes", "Printer PR-7 on floor 2 is out of toner since 08:40."),
    Sense("alice", "notes", "The freezer alarm in room 210 was reset at 09:15 by facilities."),
    Sense("alice", "notes", "The fire drill starts at 14:30 today, assemble at gate B."),
    Ask("alice", "When does the fire drill start?", expect="14:30"),
    Step("the context process is killed (SIGKILL) mid-session"),
    Kill(KILLED),
    Step("follow-ups that need earlier dialogue, from the restarted context process"),
    Ask("bob", "What is my badge number?", expect="4471"),
    Ask("alice", "Where did I leave the spare key?", expect=FOLLOW_UP_FACT),
    Step("bob barges in on a long answer"),
    Sense(
        "bob", "notes", "Forklift F2 battery is at 20 percent and charging at bay 4 until 16:00."
    ),
    Sense(
        "bob", "notes", "Pallet P-12 holds 40 boxes of sensor kits for lab 3, inspected by Omar."
    ),
    Interrupt(
        "bob",
        "Tell me about the forklift battery, the charging bay, pallet P-12 and the sensor kits.",
    ),
    Ask("bob", "Which pallet is next to me at the loading dock?", expect="P-12"),
    Step("bob leaves; when he comes back his context is gone"),
    Leave("bob"),
    Ask("bob", "What is my badge number?", absent="4471"),
    Ask("alice", "Which drawer holds the spare key?", expect=FOLLOW_UP_FACT),
)


# ---------------------------------------------------------------------------- the session


@dataclass
class Results:
    turns: list[Turn]
    compactions: dict[str, int]
    summaries: dict[tuple[str, str], list[str]]
    gaps: int
    runtimes: int
    restarts: list[tuple[str, float]]
    """Processes killed on purpose, with the seconds until they were ready again."""


class Session:
    """Runs ``SCRIPT`` against a started stack (see the module docstring)."""

    def __init__(
        self,
        config: EdgeConfig,
        bus: str,
        out: TextIO,
        *,
        script=SCRIPT,
        kill: Callable[[str], Awaitable[float]] | None = None,
    ) -> None:
        self.config = config
        self.kill = kill
        self.restarts: list[tuple[str, float]] = []
        self.out = out
        self.script = script
        self.sink = PrintingSink(out)
        self.collector = ReplyCollector()
        self.observer = StackObserver(config)
        self.client = AgentRuntime(bus, name="demo-client", ready_timeout=TURN_TIMEOUT_S)
        self.client.register("replies", self.collector)
        self.client.register(
            "voice",
            VoiceRenderer(
                self.sink,
                query_topic=QUERY_TOPIC,
                interrupted_topic=INTERRUPTED_TOPIC,
                idle_timeout_s=TURN_TIMEOUT_S,
            ),
        )
        self.client.register("observer", self.observer)
        self.sensor = AgentRuntime(bus, name="demo-sensor", ready_timeout=TURN_TIMEOUT_S)
        self.turns: list[Turn] = []

    def say(self, line: str) -> None:
        self.out.write(line + "\n")
        self.out.flush()

    async def run(self) -> Results:
        async with self.client, self.sensor:
            for step in self.script:
                await self._step(step)
            return await self._results()

    async def _step(self, step) -> None:
        if isinstance(step, Step):
            self.say(f"\n-- {step.title}")
        elif isinstance(step, Sense):
            await self._sense(step)
        elif isinstance(step, Ask):
            await self._ask(step)
        elif isinstance(step, Interrupt):
            await self._interrupt(step)
        elif isinstance(step, Leave):
            await self._leave(step)
        elif isinstance(step, Kill):
            await self._kill(step)
        else:
            raise TypeError(f"unknown script step {step!r}")

    async def _sense(self, step: Sense) -> None:
        self.say(f"  sensor -> {step.topic}[{step.participant}]: {step.text}")
        await self.sensor.publish(
            context_topic(step.topic),
            ConversationContextUpdate(step.text),
            participant_id=step.participant,
            source="sensor",
        )
        seen = self.observer.seen[(step.participant, step.topic)]
        await self.observer.until(
            lambda: any(step.text in text for text in seen),
            TURN_TIMEOUT_S,
            f"the {step.topic} update for {step.participant} reaching the context",
        )

    def _query(self, participant: str, text: str) -> Turn:
        self.say(f"  [{participant}] > {text}")
        turn = ask(self.client, self.collector, participant, text)
        self.turns.append(turn)
        return turn

    async def _ask(self, step: Ask) -> None:
        turn = self._query(step.participant, step.text)
        await turn.wait(TURN_TIMEOUT_S)
        reason = await self.sink.wait_ended(turn.request_id, TURN_TIMEOUT_S)
        answer = turn.answer
        if reason != "completed":
            raise DemoFailure(
                f"{step.participant}'s {step.text!r}: the answer was {reason}, not completed"
            )
        if step.expect is not None and step.expect not in answer:
            raise DemoFailure(
                f"{step.participant}'s {step.text!r}: expected {step.expect!r} in the answer, got "
                f"{answer!r}"
            )
        if step.absent is not None and step.absent in answer:
            raise DemoFailure(
                f"{step.participant}'s {step.text!r}: {step.absent!r} should be forgotten, got "
                f"{answer!r}"
            )

    async def _interrupt(self, step: Interrupt) -> None:
        turn = self._query(step.participant, step.text)
        await self.sink.wait_playing(turn.request_id, TURN_TIMEOUT_S)
        await self.client.publish(
            INTERRUPTED_TOPIC, Interrupted(), participant_id=step.participant, source="demo"
        )
        await turn.wait(TURN_TIMEOUT_S)  # the conversation finalizes the cut stream
        reason = await self.sink.wait_ended(turn.request_id, TURN_TIMEOUT_S)
        if reason != "interrupted":
            raise DemoFailure(
                f"{step.participant}'s barge-in: the answer ended {reason}, not interrupted"
            )
        self.say(f"  [{step.participant}] (barged in after {len(turn.answer.split())} words)")

    async def _kill(self, step: Kill) -> None:
        if self.kill is None:
            raise DemoFailure(f"killing {step.process}: this session cannot kill processes")
        self.say(f"  kill -9 {step.process}")
        seconds = await self.kill(step.process)
        self.restarts.append((step.process, seconds))
        self.say(
            f"  {step.process} restarted by the supervisor and ready again after "
            f"{seconds * 1000:.0f} ms, its context restored from its journal"
        )

    async def _leave(self, step: Leave) -> None:
        self.say(f"  [{step.participant}] leaves")
        left_us = time.time_ns() // 1000
        await self.client.publish(
            PARTICIPANT_LEFT_TOPIC,
            ParticipantLeft(),
            participant_id=step.participant,
            source="demo",
        )
        suffix = f"[{step.participant}]"

        def cleared() -> bool:
            report = self.observer.metrics.get("context")
            return (
                report is not None
                and report.timestamp_us > left_us
                and not any(actor.endswith(suffix) for actor in report.actors)
            )

        await self.observer.until(
            cleared, TURN_TIMEOUT_S, f"{step.participant}'s context being cleared"
        )
        self.observer.forget(step.participant)
        self.say(
            f"  [{step.participant}] context cleared (the context process holds no actor of theirs)"
        )

    async def _results(self) -> Results:
        names = [
            instance.runtime_name
            for name in self.config.processes
            for instance in self.config.instances(name)
        ]
        after_us = time.time_ns() // 1000
        await self.observer.until(
            lambda: all(
                name in self.observer.metrics
                and self.observer.metrics[name].timestamp_us > after_us
                for name in names
            ),
            TURN_TIMEOUT_S,
            f"a metrics report from every process ({', '.join(names)})",
        )
        gaps = sum(self.observer.metrics[name].gaps for name in names)
        gaps += self.client.metrics().gaps + self.sensor.metrics().gaps
        return Results(
            self.turns,
            dict(self.observer.compactions),
            dict(self.observer.summaries),
            gaps,
            len(names) + 2,
            self.restarts,
        )


def percentile(values: list[float], fraction: float) -> float:
    """Nearest-rank percentile of ``values`` (non-empty)."""
    ordered = sorted(values)
    return ordered[max(0, math.ceil(fraction * len(ordered)) - 1)]


def summary(results: Results, elapsed_s: float) -> list[str]:
    firsts = [turn.first_chunk_s * 1000 for turn in results.turns if turn.first_chunk_s is not None]
    participants = sorted({turn.participant_id for turn in results.turns})
    compactions = sum(results.compactions.values())
    by_section = ", ".join(
        f"{section} {count}" for section, count in sorted(results.compactions.items())
    )
    kept = [
        f"  {participant} {section}: {line[:150]}"
        for (participant, section), texts in sorted(results.summaries.items())
        for text in texts
        for line in text.splitlines()
    ]
    return [
        *(
            ["", "-- what compaction kept (the rolling summaries in the prompts now)", *kept]
            if kept
            else []
        ),
        "",
        "-- summary",
        f"  turns: {len(results.turns)} ({len(participants)} participants: "
        f"{', '.join(participants)})",
        f"  first-chunk latency: p50 {percentile(firsts, 0.5):.0f} ms, p95 "
        f"{percentile(firsts, 0.95):.0f} ms",
        f"  compactions run: {compactions}" + (f" ({by_section})" if by_section else ""),
        f"  gaps: {results.gaps} (over {results.runtimes} runtimes)",
        *(
            f"  {process} process: killed mid-session (SIGKILL), ready again after "
            f"{seconds * 1000:.0f} ms; the session continued with its context"
            for process, seconds in results.restarts
        ),
        f"  elapsed: {elapsed_s:.1f} s",
    ]


async def run_demo(out: TextIO = sys.stdout, *, verbose: bool = False) -> int:
    """Run the demo; 0 on success, 1 with a message on ``out`` naming what failed."""
    started = time.monotonic()
    config = demo_config()
    out.write(
        "xrmq demo: starting the edge stack (broker, context, compaction, conversation, router, "
        "renderer)...\n"
    )
    out.flush()
    stack = PrivateStack(config, echo=sys.stderr if verbose else None)
    try:
        async with stack:
            out.write(f"xrmq demo: {stack.ready_line.removeprefix('xrmq up: ')}\n")
            session = asyncio.create_task(
                Session(cast(EdgeConfig, stack.config), stack.bus, out, kill=stack.kill).run()
            )
            failed = asyncio.create_task(stack.wait_failed())
            await asyncio.wait([session, failed], return_when=asyncio.FIRST_COMPLETED)
            if not session.done():
                session.cancel()
                await asyncio.gather(session, return_exceptions=True)
                raise DemoFailure(await failed)
            failed.cancel()
            results = session.result()
    except (DemoFailure, TimeoutError, RuntimeError) as error:
        out.write(f"\nxrmq demo: FAILED: {error}\n")
        if not str(error).startswith("the edge stack"):
            out.write(f"last lines of the stack:\n{stack.tail(15)}\n")
        out.flush()
        return 1
    lines = summary(results, time.monotonic() - started)
    if results.gaps:
        lines.append(f"\nxrmq demo: FAILED: {results.gaps} message(s) lost on the bus")
        out.write("\n".join(lines) + "\n")
        return 1
    if not sum(results.compactions.values()):
        lines.append("\nxrmq demo: FAILED: no compaction ran")
        out.write("\n".join(lines) + "\n")
        return 1
    out.write("\n".join(lines) + "\nxrmq demo: ok\n")
    out.flush()
    return 0
