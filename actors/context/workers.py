"""Compaction workers: the actors that call the model for section actors.

Worker ``i`` of a deployment has its own mailbox (``<ns>.worker.<i>.jobs``) and runs at
most ``concurrency`` model calls at once; further jobs wait in arrival order. Each call
sends the request's system prompt and user message as they are, with thinking
disabled, and publishes a ``CompactionDone`` to the job's result topic: the text and
finish reason, or the error. A job already queued or running here is not started twice.
A job whose result topic is not one of the deployment's (``ContextPlan.result_topics``)
or a tools summarizer's (``ContextTopics.is_summarizer_result``, whose topic is made
per result and kept nowhere), or that would queue more than ``MAX_QUEUED`` jobs, is
refused, counted (``context.refused_jobs``) and logged once per interval, so whatever
the bus sends, the worker's tables stay bounded.
``CancelJobs`` stops jobs and replies once their model streams are closed, so a
manager's ``clear``/``close`` knows no model call of the participant is left running.
"""

from __future__ import annotations

import asyncio
from collections import OrderedDict
from collections.abc import Sequence

from xrmq.actors.models import ChatMessage, ChatOptions, LLMService
from xrmq.actors.runtime import Agent, AgentRuntime, Handlers, RuntimeContext, get_logger
from xrmq.actors.runtime.ratelimit import AggregatedWarnings
from xrmq.schemas._validation import check_positive
from xrmq.topics import Topic

from .compaction import CompactionRequest, CompactionResult, JobRef
from .messages import CancelJobs, CompactionDone, CompactionJob
from .plan import ContextPlan

MAX_QUEUED = 16_384
"""Jobs one worker queues (beyond its running ones); a section has one job out per
participant, so this is room for thousands of participants' sections."""

COMPACTION_OPTIONS = ChatOptions(thinking=False)
"""Compaction requests never ask a reasoning model to think (docs/context.md)."""


async def compact(llm: LLMService, request: CompactionRequest) -> CompactionResult:
    """Run one compaction request on ``llm``; a failed call is a result with ``error``."""
    messages = (
        ChatMessage("system", request.system_prompt),
        ChatMessage("user", request.user_message),
    )
    try:
        async with llm.stream(messages, COMPACTION_OPTIONS) as stream:
            text = "".join([chunk async for chunk in stream])
    except Exception as error:  # any model failure is a failed compaction, never a dead worker
        return CompactionResult(request.job, error=f"{type(error).__name__}: {error}")
    return CompactionResult(request.job, text, stream.finish_reason)


class CompactionWorker(Agent):
    """One worker of the pool of ``plan`` (its job and cancel topics, its result topics)."""

    def __init__(self, index: int, llm: LLMService, plan: ContextPlan, concurrency: int) -> None:
        check_positive(concurrency, "worker_concurrency")
        self.index = index
        self.llm = llm
        self.concurrency = concurrency
        self._topics = plan.topics
        self._queued: OrderedDict[JobRef, tuple[CompactionJob, str | None]] = OrderedDict()
        self._running: dict[JobRef, asyncio.Task[None]] = {}
        self._reply_topics: dict[str, Topic[CompactionDone]] = plan.result_topics()
        """The only topics it publishes on: fixed by the plan, never grown by a job."""
        self.refused = 0
        """Jobs refused for a reply topic that is not one of the deployment's."""
        self._warnings: AggregatedWarnings | None = None
        self._stopping = False

    def handlers(self) -> Handlers:
        """Its own job and cancel topics: each worker is a mailbox of its own."""
        return {
            self._topics.worker_jobs(self.index): self.on_job,
            self._topics.worker_cancel(self.index): self.on_cancel,
        }

    @property
    def busy(self) -> int:
        """Jobs queued or running here."""
        return len(self._queued) + len(self._running)

    @property
    def reply_topics(self) -> int:
        """How many result topics it can publish on (fixed by the plan)."""
        return len(self._reply_topics)

    def gauges(self) -> dict[str, float]:
        return {"context.refused_jobs": float(self.refused)}

    async def on_job(self, message: CompactionJob, ctx: RuntimeContext) -> None:
        job = message.request.job
        reply_topic = message.reply_topic
        refusal = None
        if reply_topic not in self._reply_topics and not self._topics.is_summarizer_result(
            reply_topic
        ):
            refusal = "compaction.bad_reply_topic"
        elif len(self._queued) >= MAX_QUEUED:
            refusal = "compaction.queue_full"
        if refusal is not None:
            self.refused += 1
            if self._warnings is None:
                self._warnings = AggregatedWarnings(get_logger(actor=self.name))
            self._warnings.warn(refusal, reply_topic, ctx.metadata.sender)
            return
        if job in self._queued or job in self._running:
            return
        self._queued[job] = (message, ctx.participant_id)
        self._pump()

    async def on_cancel(self, message: CancelJobs, ctx: RuntimeContext) -> int:
        stopped: list[asyncio.Task[None]] = []
        count = 0
        for job in message.jobs:
            if self._queued.pop(job, None) is not None:
                count += 1
            task = self._running.pop(job, None)
            if task is not None:
                task.cancel()
                stopped.append(task)
                count += 1
        if stopped:
            await asyncio.gather(*stopped, return_exceptions=True)
        self._pump()
        return count

    def _pump(self) -> None:
        while self._queued and len(self._running) < self.concurrency and not self._stopping:
            job, (message, participant_id) = self._queued.popitem(last=False)
            self._running[job] = asyncio.create_task(
                self._run(message, participant_id),
                name=f"xrmq-compaction-{job.section}-{job.job_id}",
            )

    async def _run(self, message: CompactionJob, participant_id: str | None) -> None:
        job = message.request.job
        get_logger(actor=self.name, participant=participant_id).debug(
            "compaction.started", section=job.section, job=job.job_id, attempt=message.attempt
        )
        try:
            result = await compact(self.llm, message.request)
        finally:
            if self._running.get(job) is asyncio.current_task():
                del self._running[job]
        runtime = self.runtime
        if runtime is not None and runtime.running:
            topic = self._reply_topics.get(message.reply_topic)
            if topic is None:  # a summarizer's: made for this result only
                topic = Topic(message.reply_topic, CompactionDone)
            runtime.send(
                topic,
                CompactionDone(result, self.index),
                participant_id=participant_id,
                source=self.name,
            )
        self._pump()

    async def on_stop(self) -> None:
        self._stopping = True
        self._queued.clear()
        tasks = list(self._running.values())
        self._running.clear()
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)


def worker_name(name: str, index: int) -> str:
    """The registered name of worker ``index`` of deployment ``name``."""
    return f"{name}.worker.{index}"


def register_workers(
    runtime: AgentRuntime,
    plan: ContextPlan,
    llm: LLMService,
    *,
    name: str = "context",
    indices: Sequence[int] | None = None,
    concurrency: int | None = None,
) -> list[CompactionWorker]:
    """Host compaction workers in ``runtime`` (before it starts); return them.

    ``indices`` selects which of the pool's ``plan.compaction_workers`` workers this
    process runs (default all); host each index in exactly one process.
    ``concurrency`` overrides ``plan.worker_concurrency`` for these workers.
    """
    chosen = list(range(plan.compaction_workers)) if indices is None else list(indices)
    bad = [index for index in chosen if not 0 <= index < plan.compaction_workers]
    if bad:
        raise ValueError(
            f"indices: workers {bad} are outside the pool of {plan.compaction_workers}"
        )
    workers: list[CompactionWorker] = []
    for index in chosen:
        worker = CompactionWorker(index, llm, plan, concurrency or plan.worker_concurrency)
        runtime.register(worker_name(name, index), worker)
        workers.append(worker)
    return workers
