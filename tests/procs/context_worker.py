"""A process hosting one compaction worker of a split deployment.

argv: BUS PLAN_JSON INDEX MODE. MODE ``cover`` answers every request with the update
tokens (``p<n>-u<m>``) of its material, so a test can check that nothing was lost;
``hang`` prints "job-started <digest>" and never answers (a worker to kill mid-job);
``gate`` prints "job-started <digest>" and, while its gate is closed, holds the job; it
answers as ``cover`` does. Lines on stdin: ``open`` (answers what it holds and every
later job), ``close``; each is acknowledged with "gate <line>". The gate starts as
argv[5] says (``open``/``closed``, default closed).
Every request prints its material's digest ("job <digest>"). Prints "ready".
"""

import asyncio
import hashlib
import json
import re
import sys
import threading

from xrmq.actors.context import context_plan, register_workers
from xrmq.actors.models import LLMService
from xrmq.actors.runtime import AgentRuntime

bus, plan, index, mode = (
    sys.argv[1],
    context_plan(**json.loads(sys.argv[2])),
    int(sys.argv[3]),
    sys.argv[4],
)
TOKEN = re.compile(r"\bp\d+-u\d+\b")
gate = asyncio.Event()


class TestModel(LLMService):
    async def _generate(self, request):
        material = request.messages[1].content
        digest = hashlib.sha1(material.encode()).hexdigest()[:12]
        if mode in ("hang", "gate"):
            print(f"job-started {digest}", flush=True)
            await (asyncio.Event().wait() if mode == "hang" else gate.wait())
        print(f"job {digest}", flush=True)
        yield " ".join(dict.fromkeys(TOKEN.findall(material)))


async def main() -> None:
    runtime = AgentRuntime(bus, name=f"context-worker-{index}")
    register_workers(runtime, plan, TestModel("test"), indices=[index])
    loop = asyncio.get_running_loop()
    if len(sys.argv) > 5 and sys.argv[5] == "open":
        gate.set()

    def switch(command: str) -> None:
        (gate.set if command == "open" else gate.clear)()
        print(f"gate {command}", flush=True)

    def control() -> None:
        for line in sys.stdin:
            loop.call_soon_threadsafe(switch, line.strip())

    if mode == "gate":
        threading.Thread(target=control, daemon=True).start()
    async with runtime:
        print("ready", flush=True)
        await asyncio.Event().wait()


asyncio.run(main())
