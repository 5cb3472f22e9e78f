"""Recovery across real OS processes (issue 15): a broker, the section host with its
journal, a compaction worker, and this (the conversation's) process with a split
ContextManager and a Conversation on the offline model.

50 participants with dialogue, notes (some compacted) and scene. The section host is
killed with SIGKILL mid-compaction (jobs held by the worker) and at random points of
write bursts. After each restart the replica notices the new epoch and resyncs from
the host's snapshot: every participant's ``blocks()`` equals what it was before the kill
for every acknowledged write, pending compactions are re-issued, writes the host had
not acknowledged are applied exactly once, and follow-up turns answer from the earlier
dialogue and notes. Progress is awaited on handshakes (ready lines, worker lines,
replica changes), never on sleeps.
"""

from __future__ import annotations

import asyncio
import json
import random
import re
import signal
import subprocess
import threading

import pytest

from xrmq.actors.context import ContextManager
from xrmq.actors.conversation import Conversation
from xrmq.actors.models import OfflineLLM
from xrmq.actors.runtime import AgentRuntime
from xrmq.schemas import AgentTurn, ConversationContextUpdate
from xrmq.topics import VOICE_OUTPUT_TOPIC

from buses import broker_process, expect_line, python, reap

pytestmark = pytest.mark.timeout(180)

PARTICIPANTS = [f"p{i}" for i in range(50)]
COMPACTED = PARTICIPANTS[:5]
HELD = PARTICIPANTS[5:10]
T0 = 1_714_572_785_000_000
SECOND = 1_000_000
TOKEN = re.compile(r"\bp\d+-u\d+\b")
PLAN = {
    "incremental_context_topics": ["notes"],
    "summary_context_topics": ["scene"],
    "dialogue_budget_bytes": 6000,
    "topic_budget_bytes": 1400,
    "compaction_input_budget_bytes": 3256,
    # The gate worker's summaries keep the p<N>-u<M> tokens and drop the cabinets (the
    # guards would refuse them): these tests are about recovery, not summary quality.
    "summary_guards": False,
    "namespace": "recovery-test",
    "compaction_workers": 1,
    "worker_concurrency": 8,
    "compaction_timeout_s": 60.0,
    "control_timeout_s": 30.0,
}


class Lines:
    """A process's stdout lines, read by a thread; ``until(predicate)`` returns once
    ``predicate(self)`` holds, ``count(prefix)`` counts the lines so far with ``prefix``."""

    def __init__(self, proc: subprocess.Popen) -> None:
        self.proc = proc
        self.lines: list[str] = []
        self._changed = threading.Condition()
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        assert self.proc.stdout is not None  # started with a pipe
        for line in self.proc.stdout:
            with self._changed:
                self.lines.append(line.strip())
                self._changed.notify_all()
        with self._changed:
            self.lines.append("<exit>")
            self._changed.notify_all()

    def count(self, prefix: str) -> int:
        return sum(line.startswith(prefix) for line in self.lines)

    def _wait(self, predicate) -> None:
        with self._changed:
            if not self._changed.wait_for(
                lambda: predicate(self) or "<exit>" in self.lines, timeout=60
            ):
                raise AssertionError(
                    f"worker lines: condition not met; last lines {self.lines[-5:]}"
                )
            if not predicate(self):
                raise AssertionError(f"the worker exited; last lines {self.lines[-5:]}")

    async def until(self, predicate) -> None:
        await asyncio.to_thread(self._wait, predicate)


def gate_worker(bus: str, state: str) -> tuple[subprocess.Popen, Lines]:
    proc = python(
        "context_worker.py", bus, json.dumps(PLAN), "0", "gate", state, stdin=subprocess.PIPE
    )
    lines = Lines(proc)
    return proc, lines


def control(proc: subprocess.Popen, command: str) -> None:
    assert proc.stdin is not None  # started with a pipe
    proc.stdin.write(command + "\n")
    proc.stdin.flush()


async def until(context: ContextManager, predicate) -> None:
    while not predicate():
        await context.changed()


def tokens(context: ContextManager, participant: str) -> list[str]:
    return [token for block in context.blocks(participant) for token in TOKEN.findall(block.text)]


def note(participant: str, index: int) -> str:
    number = participant[1:]
    where = f"cabinet C{number}-{index}"
    return f"{participant}-u{index} The spare battery of {participant} is in {where}."


async def restart(bus: str, journal: str, context: ContextManager, *, worker: tuple | None = None):
    """Start the section host again on its journal; return once the replica resynced."""
    resyncs = context.resyncs
    sections = python("context_sections.py", bus, json.dumps(PLAN), journal)
    await asyncio.to_thread(expect_line, sections, "ready")
    await until(context, lambda: context.resyncs > resyncs)
    return sections


async def test_killing_the_section_host_mid_compaction_and_mid_burst_loses_no_acknowledged_write(
    tmp_path,
):
    journal = str(tmp_path / "context.sqlite3")
    procs: list[subprocess.Popen] = []
    with broker_process() as bus:
        sections = python("context_sections.py", bus, json.dumps(PLAN), journal)
        worker, lines = gate_worker(bus, "open")
        procs += [sections, worker]
        try:
            await asyncio.to_thread(expect_line, sections, "ready")
            await lines.until(lambda w: w.count("ready"))
            runtime = AgentRuntime(bus, name="conversation")
            context = ContextManager(OfflineLLM(), deployment="split", **PLAN)
            runtime.register("context", context.subscriber())
            async with runtime:
                conversation = Conversation(
                    OfflineLLM(time_to_first_token_s=0, tokens_per_second=0),
                    context=context,
                    runtime=runtime,
                    output_topic=VOICE_OUTPUT_TOPIC,
                )

                async def turn(pid: str, turn_id: str, text: str, at: int) -> str:
                    async def started() -> None:
                        return None

                    result = await conversation.answer(
                        AgentTurn(pid, turn_id, text, timestamp_us=T0 + at * SECOND),
                        started=started,
                    )
                    return result.response

                # --- every participant: dialogue, notes and scene; some notes compacted
                for i, pid in enumerate(PARTICIPANTS):
                    await turn(
                        pid, f"{pid}-t1", f"My locker code is {4000 + i}, please remember it.", 1
                    )
                    for m in range(2):
                        await context.update(
                            pid,
                            "notes",
                            ConversationContextUpdate(note(pid, m)),
                            mode="incremental",
                            timestamp_us=T0 + (2 + m) * SECOND,
                        )
                    await context.update(
                        pid,
                        "scene",
                        ConversationContextUpdate(f"{pid} stands at bench B{i}."),
                        mode="summary",
                        timestamp_us=T0 + 5 * SECOND,
                    )
                for pid in COMPACTED:
                    for m in range(2, 14):
                        await context.update(
                            pid,
                            "notes",
                            ConversationContextUpdate(note(pid, m)),
                            mode="incremental",
                            timestamp_us=T0 + (4 + m) * SECOND,
                        )
                await until(
                    context,
                    lambda: all(
                        any(block.timestamp_us is None for block in context.blocks(pid))
                        for pid in COMPACTED
                    ),
                )
                control(worker, "close")
                await lines.until(lambda w: w.count("gate close"))
                for pid in HELD:  # their compaction jobs are held by the worker: mid-compaction
                    for m in range(2, 14):
                        await context.update(
                            pid,
                            "notes",
                            ConversationContextUpdate(note(pid, m)),
                            mode="incremental",
                            timestamp_us=T0 + (4 + m) * SECOND,
                        )
                await context.synced()
                await lines.until(lambda w: w.count("job-started") - w.count("job ") >= len(HELD))
                expected = {pid: context.blocks(pid) for pid in PARTICIPANTS}
                assert all(len(expected[pid]) >= 3 for pid in PARTICIPANTS)

                # --- kill -9 mid-compaction (the worker dies with its held jobs too)
                sections.send_signal(signal.SIGKILL)
                worker.send_signal(signal.SIGKILL)
                sections.wait()
                worker.wait()
                worker, lines = gate_worker(bus, "closed")
                procs.append(worker)
                await lines.until(lambda w: w.count("ready"))
                sections = await restart(bus, journal, context)
                procs.append(sections)
                assert {pid: context.blocks(pid) for pid in PARTICIPANTS} == expected
                # the pending jobs, re-issued
                await lines.until(lambda w: w.count("job-started") >= len(HELD))
                control(worker, "open")
                print("re-issued jobs answered; bursts next", flush=True)
                await until(
                    context,
                    lambda: all(
                        set(tokens(context, pid)) >= {f"{pid}-u{m}" for m in range(14)}
                        and any(block.timestamp_us is None for block in context.blocks(pid))
                        for pid in HELD
                    ),
                )

                # --- kill -9 at random points of write bursts
                rng = random.Random(15)
                for burst in range(2):
                    await context.synced()
                    before = {pid: context.blocks(pid) for pid in PARTICIPANTS}
                    kill_at = rng.randrange(10, 90)
                    writes: list[tuple[str, str]] = []
                    updates: list[asyncio.Task] = []
                    for k in range(100):
                        if k == kill_at:
                            sections.send_signal(signal.SIGKILL)
                        pid = PARTICIPANTS[10 + k % 40]
                        if k % 2:
                            text = note(pid, 20 + 10 * burst + k // 40)
                            updates.append(
                                asyncio.create_task(
                                    context.update(
                                        pid,
                                        "notes",
                                        ConversationContextUpdate(text),
                                        mode="incremental",
                                        timestamp_us=T0 + (100 + k) * SECOND,
                                    )
                                )
                            )
                        else:
                            text = f"burst {burst} write {k} of {pid}"
                            context.record_exchange(
                                pid,
                                text,
                                "ok",
                                timestamp_us=T0 + (100 + k) * SECOND,
                                exchange_id=f"b{burst}-{k}",
                            )
                        writes.append((pid, text))
                        if k % 5 == 4:
                            # let the bus carry some (and the host acknowledge them)
                            await asyncio.sleep(0)
                    sections.wait()
                    sections = await restart(bus, journal, context)
                    procs.append(sections)
                    await asyncio.gather(*updates)
                    await context.synced()
                    for pid, text in writes:
                        assert sum(text in block.text for block in context.blocks(pid)) == 1, (
                            pid,
                            text,
                        )
                    for pid in PARTICIPANTS[10:]:
                        now = context.blocks(pid)
                        assert [b for b in now if b in before[pid]] == list(before[pid])

                # --- follow-up turns answer from the earlier dialogue and notes
                for i, pid in enumerate(PARTICIPANTS[10:20], start=10):
                    code = await turn(pid, f"{pid}-t9", "What is my locker code?", 900)
                    assert str(4000 + i) in code, code
                    cabinet = await turn(
                        pid, f"{pid}-t10", "Which cabinet holds the spare battery?", 901
                    )
                    assert f"C{i}-" in cabinet, cabinet
                await conversation.close()
        finally:
            reap(*procs)


class ResyncProbe:
    """Looks at a manager at every pass of the event loop while open, recording
    ``(resyncs, resyncing)`` each time ``resyncs`` grew: a resync counted must be over.

    Every pass, not every change the manager reports: a task resumed by anything else
    (a thread's reply) between the count and the end of the resync would see it counted
    and still under way, and a check on ``changed()`` alone runs too late to see that.
    """

    def __init__(self, context: ContextManager) -> None:
        self.context = context
        self.resyncs = context.resyncs
        self.seen: list[tuple[int, bool]] = []
        self._handle: asyncio.Handle | None = None

    def _look(self) -> None:
        if self.context.resyncs != self.resyncs:
            self.resyncs = self.context.resyncs
            self.seen.append((self.resyncs, self.context.resyncing))
        self._handle = asyncio.get_running_loop().call_soon(self._look)

    def __enter__(self) -> ResyncProbe:
        self._look()
        return self

    def __exit__(self, *_) -> None:
        assert self._handle is not None
        self._handle.cancel()


async def test_a_host_restarted_without_its_journal_is_never_served_stale(tmp_path):
    """A replica that sees a host's new epoch resyncs from its snapshot: views the restarted
    host no longer has are dropped, not served (here the host lost everything)."""
    with broker_process() as bus:
        sections = python("context_sections.py", bus, json.dumps(PLAN))
        procs = [sections]
        try:
            await asyncio.to_thread(expect_line, sections, "ready")
            runtime = AgentRuntime(bus, name="conversation")
            context = ContextManager(OfflineLLM(), deployment="split", **PLAN)
            runtime.register("context", context.subscriber())
            async with runtime:
                for pid in PARTICIPANTS[:3]:
                    await context.update(
                        pid,
                        "scene",
                        ConversationContextUpdate(f"{pid} at bench 1."),
                        mode="summary",
                        timestamp_us=T0,
                    )
                assert all(context.blocks(pid) for pid in PARTICIPANTS[:3])
                sections.send_signal(signal.SIGKILL)
                sections.wait()
                resyncs = context.resyncs
                with ResyncProbe(context) as probe:
                    # no journal: it starts empty
                    sections = python("context_sections.py", bus, json.dumps(PLAN))
                    procs.append(sections)
                    await asyncio.to_thread(expect_line, sections, "ready")
                    await until(context, lambda: context.resyncs > resyncs)
                assert probe.seen and not any(resyncing for _, resyncing in probe.seen), probe.seen
                assert not context.resyncing
                assert [context.blocks(pid) for pid in PARTICIPANTS[:3]] == [(), (), ()]
                await context.update(
                    "p1",
                    "scene",
                    ConversationContextUpdate("p1 at bench 2."),
                    mode="summary",
                    timestamp_us=T0 + SECOND,
                )
                assert [
                    block.text.endswith("p1 at bench 2.") for block in context.blocks("p1")
                ] == [True]
        finally:
            reap(*procs)
