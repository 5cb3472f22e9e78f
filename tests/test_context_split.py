"""Split deployment across real OS processes (issue 5): a broker, a process hosting the
section actors, two compaction-worker processes, a sensor process, and the manager in
this (the conversation's) process. One worker is SIGKILLed while it holds a job.

Afterwards every sensor update is either verbatim in its participant's context or named
in a summary (the surviving worker's model writes the update tokens of its material),
and no participant sees another's context. Readiness is each process's "ready" line;
progress is awaited on the manager's replica changes, never on sleeps.
"""

from __future__ import annotations

import asyncio
import json
import re
import signal
import subprocess
from typing import Any

import pytest

from xrmq.actors.context import ContextManager
from xrmq.actors.models import ScriptedLLM
from xrmq.actors.runtime import AgentRuntime

from buses import broker_process, expect_line, python, reap

pytestmark = pytest.mark.timeout(60)

PARTICIPANTS = ("p1", "p2", "p3")
UPDATES = 24
TOKEN = re.compile(r"\bp\d+-u\d+\b")
PLAN: dict[str, Any] = {
    "incremental_context_topics": ["sample.notes"],
    "dialogue_budget_bytes": 1200,
    "topic_budget_bytes": 1200,
    "compaction_input_budget_bytes": 856,
    "namespace": "split-test",
    "compaction_workers": 2,
    "compaction_timeout_s": 1.0,
}


def tokens(context: ContextManager, participant: str) -> set[str]:
    return {token for block in context.blocks(participant) for token in TOKEN.findall(block.text)}


async def run_manager(bus: str, workers: list[subprocess.Popen]) -> tuple[dict, str]:
    runtime = AgentRuntime(bus, name="conversation")
    context = ContextManager(ScriptedLLM(), deployment="split", **PLAN)
    runtime.register("context", context.subscriber())
    async with runtime:
        try:
            context.record_exchange(
                "p1", "Where is the sensor?", "Bay 4.", timestamp_us=1, exchange_id="t1"
            )
            assert "Bay 4." in context.blocks("p1")[0].text  # read-your-writes across processes
            sensor = python("context_sensor.py", bus, "sample.notes", str(UPDATES), *PARTICIPANTS)
            try:
                started = await asyncio.to_thread(expect_line, workers[0], "job-started")
                workers[0].send_signal(signal.SIGKILL)  # dies holding a job
                await asyncio.to_thread(expect_line, sensor, "published")
            finally:
                reap(sensor)
            expected = {p: {f"{p}-u{m}" for m in range(UPDATES)} for p in PARTICIPANTS}
            while any(not expected[p] <= tokens(context, p) for p in PARTICIPANTS):
                await context.changed()
            await context.synced()
            seen = {p: tokens(context, p) for p in PARTICIPANTS}
            # the section's view has it
            assert any("Bay 4." in block.text for block in context.blocks("p1"))
            await context.clear("p2")
            assert context.blocks("p2") == ()
            return seen, started.split()[1]
        finally:
            await context.close()


def test_split_deployment_loses_no_update_when_a_worker_is_killed_mid_job():
    with broker_process() as bus:
        plan = json.dumps(PLAN)
        sections = python("context_sections.py", bus, plan)
        workers = [
            python("context_worker.py", bus, plan, "0", "hang"),
            python("context_worker.py", bus, plan, "1", "cover"),
        ]
        try:
            for proc in (sections, *workers):
                expect_line(proc, "ready")
            seen, killed_job = asyncio.run(asyncio.wait_for(run_manager(bus, workers), 45))
        finally:
            reap(sections, *workers)
        survivor_jobs = {
            line.split()[1]
            for line in workers[1].stdout.read().splitlines()
            if line.startswith("job ")
        }
    assert workers[0].returncode == -signal.SIGKILL
    assert killed_job in survivor_jobs  # the killed worker's job was retried at the other worker
    for participant in PARTICIPANTS:
        # nothing lost, nothing foreign
        assert seen[participant] == {f"{participant}-u{m}" for m in range(UPDATES)}
