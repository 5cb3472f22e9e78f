"""Processes of the turn and storm suites: the turn path, split over OS processes.

``python -m bench.turn_workers ROLE BUS [CONFIG]``; CONFIG is the JSON of
``turn_rig.Config`` (the context plan's keyword arguments and the two models' delays),
the same for every process of one deployment. Roles, built from the public APIs only:

- ``sections``: the context section actors (``register_sections``), journaling to the
  config's ``journal`` when it names one.
- ``workers``: the compaction workers (``register_workers``) on the compaction model,
  and a tally of the ``CompactionDone`` results on the bus; ``stats`` prints
  ``{"compactions", "failed", "busy"}`` (results seen; jobs queued or running here).
- ``conversation``: a ``Conversation`` over a split ``ContextManager`` (the replica),
  served on the bus as "conversation", on the answer model (``answer_litellm``: a
  ``LiteLLMService`` on litellm's ``mock_response``, prepared before ``ready`` as the
  edge box's roles prepare theirs).
- ``router``: an ``AgentRouter`` actor whose one destination is ``remote("conversation")``;
  with the config's ``telemetry`` (an OTLP/HTTP traces URL), a ``TraceExporter`` too and the
  commands ``telemetry MODE`` and ``flush`` (``telemetry_commands``).
- ``client``: the renderer side, where turns are measured. A ``VoiceRenderer`` (query
  and output topics) plays into a ``CallbackSink``; ``turns N P1,P2,.. PAUSE_MS`` runs
  N sequential turns for each participant, all participants at once, each turn
  followed by a pause drawn uniformly from [0, 2 x PAUSE_MS] (a user's think time,
  which also spreads the samples over time), and prints
  ``{"first_us", "bus_us", "failed"}``: per turn, the time from just before its
  ``UserQuery`` is published to the renderer playing the reply's first segment, and to
  the first nonblank reply fragment reaching this process; both are
  ``time.monotonic_ns`` differences in this one process. A turn ends when its response
  ended (the final frame played); the next turn of that participant starts then.
- ``sensor``: ``storm RATE N`` publishes incremental ``ConversationContextUpdate``s on
  the context topic at RATE per second, round-robin over participants p0..p(N-1),
  until ``stop``, which prints ``{"published", "seconds"}``.

Every role prints ``ready`` once its runtime is ready (its subscriptions are live
through the broker), then reads commands from stdin until it closes.
"""

from __future__ import annotations

import asyncio
import itertools
import json
import os
import random
import sys
import time
from collections.abc import Awaitable, Callable

from xrmq.actors.context import ContextManager, context_plan, register_sections, register_workers
from xrmq.actors.context.messages import CompactionDone
from xrmq.actors.context.store import open_store
from xrmq.actors.conversation import Conversation
from xrmq.actors.models import LiteLLMService, LLMService, OfflineLLM
from xrmq.actors.routing import AgentRouter, SingleDestination, remote, serve
from xrmq.actors.runtime import Agent, AgentRuntime, Handlers, RuntimeContext, run
from xrmq.actors.voice import CallbackSink, ResponseEnded, Segment, VoiceRenderer
from xrmq.schemas import ConversationContextUpdate, ResponseOutput, UserQuery
from xrmq.topics import (
    INTERRUPTED_TOPIC,
    QUERY_TOPIC,
    TURNS_TOPIC,
    VOICE_OUTPUT_TOPIC,
    Topic,
    context_topic,
)

TURN_TIMEOUT_S = 30.0
WORD_LETTERS = "abcdefghijklmnopqrtuvwxyz"
"""No "s": OfflineLLM folds a final "s" (plurals), so "zqas" would match "zqa"."""


def emit(record: dict) -> None:
    print(json.dumps(record), flush=True)


def question(number: int) -> str:
    """A question whose one content word (letters only) appears nowhere in any context.

    OfflineLLM answers by quoting the context lines that share words with the
    question, and a quoted answer becomes part of the dialogue that the next answer
    quotes: replies would grow turn after turn, and with them the streaming load of
    every turn. With no shared word every reply is the same 11-word no-match answer,
    while the prompt still carries the participant's whole context.
    """
    letters = ""
    while True:
        number, digit = divmod(number, len(WORD_LETTERS))
        letters += WORD_LETTERS[digit]
        if not number:
            return f"What about zq{letters}?"


def model(delays: list[float]) -> OfflineLLM:
    time_to_first_token_s, tokens_per_second = delays
    return OfflineLLM(
        time_to_first_token_s=time_to_first_token_s, tokens_per_second=tokens_per_second
    )


async def serve_commands(
    runtime: AgentRuntime, commands: dict[str, Callable[..., Awaitable[None]]]
) -> None:
    """Start ``runtime``, print ``ready``, run stdin commands until stdin closes."""
    async with runtime:
        print("ready", flush=True)
        while words := (await asyncio.to_thread(sys.stdin.readline)).split():
            await commands[words[0]](*words[1:])


# ---------------------------------------------------------------- context


async def sections(bus: str, config: dict) -> None:
    runtime = AgentRuntime(bus, name="bench-sections")
    journal = config.get("journal")
    store = open_store(journal) if journal else None
    register_sections(runtime, context_plan(**config["plan"]), store=store)
    await serve_commands(runtime, {})


class CompactionTally(Agent):
    """Counts the compaction results published on the deployment's result topics."""

    def __init__(self, result_topics: list[Topic]) -> None:
        self._topics = result_topics
        self.compactions = 0
        self.failed = 0

    def handlers(self) -> Handlers:
        return dict.fromkeys(self._topics, self.on_done)

    async def on_done(self, message: CompactionDone, ctx: RuntimeContext) -> None:
        self.compactions += 1
        self.failed += message.result.error is not None


async def workers(bus: str, config: dict) -> None:
    plan = context_plan(**config["plan"])
    runtime = AgentRuntime(bus, name="bench-workers")
    pool = register_workers(runtime, plan, model(config["compaction_model"]))
    topics = [
        plan.topics.dialogue_result,
        *(plan.topics.topic_result(t) for t in config["plan"]["incremental_context_topics"]),
    ]
    tally = CompactionTally(topics)
    runtime.register("compaction-tally", tally)

    async def stats() -> None:
        emit(
            {
                "compactions": tally.compactions,
                "failed": tally.failed,
                "busy": sum(w.busy for w in pool),
            }
        )

    await serve_commands(runtime, {"stats": stats})


# ---------------------------------------------------------------- turn path

MOCK_ANSWER = "I have nothing about that in what I was given."
"""The mock model's answer: the same words OfflineLLM says when nothing matches."""


async def conversation(bus: str, config: dict) -> None:
    llm: LLMService = model(config["answer_model"])
    if config.get("answer_litellm"):
        llm = LiteLLMService(
            "openai/gpt-4o-mini", api_key="sk-bench", mock_response=MOCK_ANSWER, retries=0
        )
    if config.get("answer_prepare", True):
        llm.prepare()
    context = ContextManager(model(config["answer_model"]), **config["plan"], deployment="split")
    runtime = AgentRuntime(bus, name="bench-conversation")
    runtime.register("context", context.subscriber())
    agent = Conversation(
        llm,
        context=context,
        runtime=runtime,
        output_topic=VOICE_OUTPUT_TOPIC,
        instructions="You help operators in the pump hall.",
    )
    runtime.register("conversation-server", serve("conversation", agent))
    await serve_commands(runtime, {})


async def router(bus: str, config: dict) -> None:
    runtime = AgentRuntime(bus, name="bench-router")
    destination = runtime.register("conversation-proxy", remote("conversation"))
    router = runtime.register(
        "router",
        AgentRouter(
            {"conversation": destination},
            SingleDestination(),
            default="conversation",
            query_topic=QUERY_TOPIC,
            output_topic=VOICE_OUTPUT_TOPIC,
            interrupted_topic=INTERRUPTED_TOPIC,
        ),
    )
    await serve_commands(runtime, telemetry_commands(runtime, router, config.get("telemetry")))


def telemetry_commands(
    runtime: AgentRuntime, router: AgentRouter, endpoint: str | None
) -> dict[str, Callable[..., Awaitable[None]]]:
    """With an OTLP ``endpoint``: a ``TraceExporter``, and the commands ``telemetry MODE``
    (``off``: no record published; ``records``: on ``xrmq.turns``, the default; ``otlp``:
    published and exported, the exporter one of the router's record observers as in the
    box) and ``flush`` (the exporter sends what it holds), each printing a line once done."""
    if endpoint is None:
        return {}
    from xrmq.actors.edge.otlp import TraceExporter  # the otel extra: only here

    exporter = runtime.register("trace-exporter", TraceExporter(endpoint))
    topics = {"off": None, "records": TURNS_TOPIC, "otlp": TURNS_TOPIC}

    async def telemetry(mode: str) -> None:
        router.record_topic = topics[mode]
        router.record_observers[:] = [exporter.observe] if mode == "otlp" else []
        emit({"mode": mode})

    async def flush() -> None:
        emit({"flushed": await asyncio.to_thread(exporter.flush)})

    return {"telemetry": telemetry, "flush": flush}


class Turns:
    """The client's open turns, keyed by request id (the ``UserQuery``'s message id)."""

    def __init__(self) -> None:
        self.began: dict[str, int] = {}
        self.first: dict[str, int] = {}
        self.arrived: dict[str, int] = {}
        self.ended: dict[str, asyncio.Future[str]] = {}
        self._requests: dict[int, str] = {}

    def on_segment(self, segment: Segment) -> None:
        now = time.monotonic_ns()
        self._requests[segment.response] = segment.request_id or ""
        if segment.request_id in self.began:
            self.first.setdefault(segment.request_id, now)

    def on_end(self, ended: ResponseEnded) -> None:
        future = self.ended.get(self._requests.pop(ended.response, ""))
        if future is not None and not future.done():
            future.set_result(ended.reason)

    def on_fragment(self, request_id: str | None) -> None:
        if request_id in self.began:
            self.arrived.setdefault(request_id, time.monotonic_ns())


class FirstFragment(Agent):
    """Notes when a turn's first nonblank reply fragment reaches the client process."""

    def __init__(self, turns: Turns) -> None:
        self._turns = turns

    def handlers(self) -> Handlers:
        return {VOICE_OUTPUT_TOPIC: self.on_output}

    async def on_output(self, message: ResponseOutput, ctx: RuntimeContext) -> None:
        if message.text.strip():
            self._turns.on_fragment(message.request_id)


async def client(bus: str, config: dict) -> None:
    turns = Turns()
    runtime = AgentRuntime(bus, name="bench-client")
    runtime.register(
        "voice",
        VoiceRenderer(
            CallbackSink(turns.on_segment, turns.on_end, words_per_minute=None),
            output_topic=VOICE_OUTPUT_TOPIC,
            query_topic=QUERY_TOPIC,
            interrupted_topic=INTERRUPTED_TOPIC,
        ),
    )
    runtime.register("first-fragment", FirstFragment(turns))
    loop = asyncio.get_running_loop()
    asked = itertools.count()

    async def talk(
        participant: str, count: int, pause_s: float, first_us: list[float], bus_us: list[float]
    ) -> int:
        failed = 0
        for _ in range(count):
            await asyncio.sleep(random.uniform(0, 2 * pause_s))
            text = question(next(asked))
            began = time.monotonic_ns()
            request = runtime.send(
                QUERY_TOPIC, UserQuery(text, time.time_ns() // 1000), participant_id=participant
            )
            turns.began[request] = began
            ended = turns.ended[request] = loop.create_future()
            try:
                reason = await asyncio.wait_for(ended, TURN_TIMEOUT_S)
            except TimeoutError:
                reason = "timeout"
            first, arrived = turns.first.pop(request, None), turns.arrived.pop(request, None)
            del turns.began[request], turns.ended[request]
            if reason != "completed" or first is None or arrived is None:
                failed += 1
                continue
            first_us.append((first - began) / 1000)
            bus_us.append((arrived - began) / 1000)
        return failed

    async def run_turns(count: str, participants: str, pause_ms: str) -> None:
        first_us: list[float] = []
        bus_us: list[float] = []
        failed = await asyncio.gather(
            *(
                talk(p, int(count), float(pause_ms) / 1000, first_us, bus_us)
                for p in participants.split(",")
            )
        )
        emit({"first_us": first_us, "bus_us": bus_us, "failed": sum(failed)})

    await serve_commands(runtime, {"turns": run_turns})


# ---------------------------------------------------------------- sensor


class Storm:
    """Publishes incremental context updates at a fixed rate until stopped."""

    def __init__(self, runtime: AgentRuntime, topic: Topic) -> None:
        self._runtime = runtime
        self._topic = topic
        self._task: asyncio.Task[None] | None = None
        self._began = 0.0
        self.published = 0

    async def start(self, rate: str, participants: str) -> None:
        self.published = 0
        self._began = time.monotonic()
        self._task = asyncio.create_task(self._run(float(rate), int(participants)))

    async def stop(self) -> None:
        assert self._task is not None  # started
        self._task.cancel()
        await asyncio.gather(self._task, return_exceptions=True)
        emit({"published": self.published, "seconds": time.monotonic() - self._began})

    async def _run(self, rate: float, participants: int) -> None:
        """Every 10 ms, publish what is due since the start (paced on the clock, no drift)."""
        while True:
            due = int((time.monotonic() - self._began) * rate)
            for i in range(self.published, due):
                text = (
                    f"note {i}: pump {i % 7} pressure {i % 97} kPa, valve {i % 5} at {i % 100} "
                    "percent open"
                )
                self._runtime.send(
                    self._topic,
                    ConversationContextUpdate(text),
                    participant_id=f"p{i % participants}",
                    source="sensor",
                )
            self.published = max(self.published, due)
            await asyncio.sleep(0.01)


async def sensor(bus: str, config: dict) -> None:
    runtime = AgentRuntime(bus, name="bench-sensor")
    storm = Storm(runtime, context_topic(config["plan"]["incremental_context_topics"][0]))
    await serve_commands(runtime, {"storm": storm.start, "stop": storm.stop})


ROLES = {
    "sections": sections,
    "workers": workers,
    "conversation": conversation,
    "router": router,
    "client": client,
    "sensor": sensor,
}

BACKGROUND = {"sections", "workers"}
"""Roles off the answer path, run at the lowest priority, as the edge box runs them (nice 19)."""

if __name__ == "__main__":
    role, bus = sys.argv[1], sys.argv[2]
    if role in BACKGROUND:
        os.nice(19)
    run(ROLES[role](bus, json.loads(sys.argv[3]) if len(sys.argv) > 3 else {}))
