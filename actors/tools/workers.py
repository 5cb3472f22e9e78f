"""Tier 2 on the context's compaction workers: ``WorkerSummarizer``.

The tool agent's summaries are written by the same worker pool that compacts context
sections (docs/context.md: compaction never runs on the answer path's model), so a box has one
place where summarizing model calls run and are bounded. Each summary is one
``CompactionJob`` (section ``tools``) sent to a worker chosen round robin; the worker
publishes its ``CompactionDone`` on this actor's own result topic. A job that fails,
comes back empty or takes longer than ``timeout_s`` is a failed summary
(``SUMMARIZE_FAILED``: the transcript stays as it is). A summary over
``SUMMARY_LIMIT_TOKENS`` goes back to a worker once to be condensed (``within_tokens``).
"""

from __future__ import annotations

import asyncio
import itertools
import uuid
from typing import Any

from xrmq.actors.context.compaction import CompactionRequest, JobRef
from xrmq.actors.context.messages import CompactionDone, CompactionJob
from xrmq.actors.context.plan import ContextPlan
from xrmq.actors.runtime import Agent, Handlers, RuntimeContext, get_logger
from xrmq.topics import Topic

from .summary import (
    SUMMARY_LIMIT_BYTES,
    SUMMARY_LIMIT_TOKENS,
    SUMMARY_SECTIONS,
    summary_request,
    within_tokens,
)

SECTION = "tools"


class WorkerSummarizer(Agent):
    """A ``Summarize`` backed by the compaction workers; register it, then call it."""

    def __init__(
        self,
        plan: ContextPlan,
        *,
        timeout_s: float = 60.0,
        limit_bytes: int = SUMMARY_LIMIT_BYTES,
        limit_tokens: int = SUMMARY_LIMIT_TOKENS,
        sections: tuple[str, ...] = SUMMARY_SECTIONS,
    ) -> None:
        if not timeout_s > 0:
            raise ValueError("WorkerSummarizer.timeout_s: must be positive")
        self.plan = plan
        self.timeout_s = timeout_s
        self.limit_bytes = limit_bytes
        self.limit_tokens = limit_tokens
        self.sections = sections
        """The summary's markdown sections (``summary.summary_prompt``; (): plain prose)."""
        self.generation = uuid.uuid4().hex[:12]
        name = f"{plan.topics.namespace}.tools.{self.generation}.result"
        self.results = Topic(name, CompactionDone)
        self._ids = itertools.count(1)
        self._waiting: dict[int, asyncio.Future[CompactionDone]] = {}
        self.failed = 0

    def handlers(self) -> Handlers:
        return {self.results: self.on_done}

    async def on_done(self, message: CompactionDone, ctx: RuntimeContext) -> None:
        future = self._waiting.pop(message.result.job.job_id, None)
        if future is not None and not future.done():
            future.set_result(message)

    async def __call__(self, head: tuple[Any, ...], previous: str | None) -> str | None:
        summary = await self._ask(*summary_request(head, previous, self.limit_bytes, self.sections))
        if summary is None:
            return None
        return await within_tokens(
            summary, self._ask, limit_tokens=self.limit_tokens, limit_bytes=self.limit_bytes
        )

    async def _ask(self, system: str, user: str) -> str | None:
        """One compaction job's text; ``None`` (counted, logged) when it failed."""
        runtime = self.runtime
        if runtime is None or not runtime.running:
            return None
        job_id = next(self._ids)
        job = JobRef(SECTION, self.generation, job_id)
        request = CompactionRequest(job, "compact", system, user, self.limit_bytes)
        future: asyncio.Future[CompactionDone] = asyncio.get_running_loop().create_future()
        self._waiting[job_id] = future
        worker = job_id % self.plan.compaction_workers
        jobs = self.plan.topics.worker_jobs(worker)
        runtime.send(jobs, CompactionJob(request, self.results.name))
        try:
            done = await asyncio.wait_for(future, self.timeout_s)
        except TimeoutError:
            done = None
        finally:
            self._waiting.pop(job_id, None)
        if done is None or done.result.error is not None or not done.result.text.strip():
            self.failed += 1
            get_logger(actor=self.name).warning(
                "tools.summary_failed",
                job=job_id,
                error=None if done is None else done.result.error or "empty summary",
            )
            return None
        return done.result.text.strip()
