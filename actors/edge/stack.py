"""The built-in roles of the edge box: the conversation stack split over processes.

- ``context``: the context section actors (one dialogue section per participant,
  sharded over the process's replicas, and one actor per context topic on replica 0),
  each replica journaling to its own database (``context_store_path``) unless
  ``[context] persist = false``, and restoring it before it reports ready; and each
  tools destination's transcripts (``TranscriptActor``, keyed the same way, journaled
  in the same database).
- ``compaction``: compaction workers; each replica hosts its own slice of the pool.
- ``conversation``: one ``Conversation`` per configured destination (a ``ToolAgent`` for
  ``kind = "tools"``, whose tier-2 summaries the compaction workers write; a
  ``RealtimeConversation`` for ``kind = "realtime"``, on ``audio.in``, whose checkpoint
  summaries they write too), served on
  the bus under the destination's name, over one split ``ContextManager`` (its replica
  of the section views). A destination's ``participant_left`` also clears the participant's
  context: the router calls it after cancelling and draining that participant's turns,
  which is when docs/context.md ("Lifecycle") says the context may be cleared.
- ``router``: the ``AgentRouter`` actor on the query, interrupted and participant topics,
  reaching every destination through a remote proxy that takes a destination silent
  for ``router.destination_dead_after_s`` as dead (its answer fails, its reply stream
  gets its final frame).

On SIGTERM the router and the conversation servers let answers in flight finish for
70% of ``supervisor.shutdown_timeout_s``, then cancel what is left.
- ``renderer``: a ``VoiceRenderer`` with a console sink on the voice output topic (with
  ``voice.speech_out``: ``voice.tts`` speech as ``audio.out`` frames), reporting each
  reply's playback stages, which the router (in a box with a renderer) adds to the turn's
  record.
- ``voice``: speech in (``xrmq.actors.voice.listener``): one ``VoiceInput`` per participant
  on ``audio.in`` (VAD, speech-to-text), publishing queries and barge-in interruptions.

Every process derives the same ``ContextPlan`` from the config, so the section actors,
the workers and the managers agree on topics, budgets and the worker pool.
"""

from __future__ import annotations

import os
import re
import stat
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

from xrmq.actors.context import ContextManager, context_plan, register_sections, register_workers
from xrmq.actors.context.journal import ON_DEMAND_ALL, ContextStore
from xrmq.actors.context.plan import ContextPlan
from xrmq.actors.context.store import open_store, orphan_journals
from xrmq.actors.conversation import Conversation
from xrmq.actors.models import LLMService, ModelSpec, create_llm
from xrmq.actors.routing import (
    AgentRouter,
    KeywordDecisions,
    LLMDecisions,
    SingleDestination,
    remote,
    serve,
)
from xrmq.actors.routing.decisions import DecisionService
from xrmq.actors.routing.destination import RoutableAgent
from xrmq.actors.runtime import AgentRuntime
from xrmq.actors.runtime.address import UnsafeDirectoryError
from xrmq.actors.tools import AutoCompactor, CompactorAbstract, ToolAgent
from xrmq.actors.tools.control import CompactServer
from xrmq.actors.tools.edits import TranscriptEditServer
from xrmq.actors.tools.store import register_transcripts
from xrmq.actors.tools.workers import WorkerSummarizer
from xrmq.actors.voice import ConsoleSink, Sink, VoiceRenderer
from xrmq.schemas import RoutingAid
from xrmq.topics import (
    INTERRUPTED_TOPIC,
    PLAYBACK_STAGES_TOPIC,
    QUERY_TOPIC,
    VOICE_OUTPUT_TOPIC,
)

from .config import ConfigError, EdgeConfig, ProcessInstance
from .dotted import config_base, resolve_compactor
from .telemetry import traces_endpoint


def worker_slices(config: EdgeConfig) -> dict[tuple[str, int], list[int]]:
    """The compaction-worker indices each (process, replica) hosts, over the whole pool."""
    slices: dict[tuple[str, int], list[int]] = {}
    next_index = 0
    for name, spec in config.processes.items():
        if "compaction" not in spec.roles:
            continue
        for shard in range(spec.replicas):
            slices[(name, shard)] = list(range(next_index, next_index + spec.compaction_workers))
            next_index += spec.compaction_workers
    return slices


def section_hosts(config: EdgeConfig) -> int:
    """How many processes host context sections: the replicas of the ``context`` process."""
    replicas = [spec.replicas for spec in config.processes.values() if "context" in spec.roles]
    return max(replicas, default=1)


def plan_of(config: EdgeConfig) -> ContextPlan:
    """The context plan every process of ``config`` shares."""
    workers = sum(len(indices) for indices in worker_slices(config).values())
    return context_plan(
        **config.context.manager_kwargs(),
        compaction_workers=max(workers, 1),
        section_hosts=section_hosts(config),
        retire_idle_s=config.context.retire_idle_s,
        max_resident_participants=config.context.max_resident_participants,
    )


def state_dir(config: EdgeConfig) -> Path:
    """Where the context journals of ``config`` live: ``[context] state_dir``, else a
    directory per bus under ``$XDG_STATE_HOME/xrmq`` (else ``~/.local/state/xrmq``)."""
    if config.context.state_dir is not None:
        return Path(config.context.state_dir).expanduser()
    base = os.environ.get("XDG_STATE_HOME") or str(Path.home() / ".local" / "state")
    bus = re.sub(r"[^A-Za-z0-9._-]+", "_", config.bus.address).strip("_") or "default"
    return Path(base) / "xrmq" / bus


def private_state_dir(config: EdgeConfig) -> Path:
    """``state_dir(config)``, created (mode 0700) if missing and checked as the bus's
    runtime directory is (``runtime_dir``): the journals hold every participant's
    context, so a symlink, a directory owned by another user or one open to others is
    refused with ``UnsafeDirectoryError`` naming the path and the rule."""
    path = state_dir(config)
    if not path.is_symlink():
        path.mkdir(mode=0o700, parents=True, exist_ok=True)
    info = os.lstat(path)
    mode = stat.S_IMODE(info.st_mode)
    if stat.S_ISLNK(info.st_mode):
        problem = "is a symlink (refused: it could point anywhere)"
    elif info.st_uid != os.getuid():
        problem = f"must be owned by uid {os.getuid()}, not {info.st_uid}"
    elif mode & 0o077:
        problem = f"must not be accessible to other users (mode {mode:04o}, needs 0700)"
    else:
        return path
    raise UnsafeDirectoryError(
        f"context.state_dir: directory {path} {problem}; chmod 700 it or set [context] "
        "state_dir to a real directory of yours of mode 0700"
    )


def context_store_path(config: EdgeConfig, shard: int) -> Path:
    """The journal of context process ``shard``."""
    return state_dir(config) / f"{plan_of(config).namespace}-{shard}.sqlite3"


def open_context_store(config: EdgeConfig, shard: int) -> ContextStore | None:
    """Open (and read) the journal of context process ``shard``, in the checked state
    directory (``private_state_dir``); None with ``persist = false``."""
    if not config.context.persist:
        return None
    on_corrupt: Any = config.context.on_corrupt  # validated by the config's decoding
    private_state_dir(config)
    return open_store(
        context_store_path(config, shard),
        on_corrupt=on_corrupt,
        on_demand_prefix=ON_DEMAND_ALL,  # a restart reads only ids and pending jobs
    )


def prepared_llm(spec: ModelSpec) -> LLMService:
    """``create_llm(spec)``, prepared (litellm imported) while the process is not yet ready."""
    llm = create_llm(spec)
    llm.prepare()
    return llm


def open_orphan_stores(config: EdgeConfig, shards: int) -> list[ContextStore]:
    """The journals of context shards beyond ``shards`` (the replica count went down), for
    shard 0 to migrate their participants to the shards that own them now."""
    if not config.context.persist:
        return []
    on_corrupt: Any = config.context.on_corrupt
    return [
        open_store(path, on_corrupt=on_corrupt)
        for path in orphan_journals(private_state_dir(config), plan_of(config).namespace, shards)
    ]


def context_role(runtime: AgentRuntime, config: EdgeConfig, process: ProcessInstance) -> None:
    topics: list[str] | None = None if process.shard == 0 else []
    orphans = open_orphan_stores(config, process.shards) if process.shard == 0 else []
    store = open_context_store(config, process.shard)
    register_sections(
        runtime,
        plan_of(config),
        shard=process.shard,
        shards=process.shards,
        topics=topics,
        store=store,
        orphans=orphans,
    )
    for name, destination in config.destinations.items():
        if destination.kind == "tools":  # its transcripts, keyed and journaled like the sections
            register_transcripts(
                runtime, name, shard=process.shard, shards=process.shards, store=store
            )


def compaction_role(runtime: AgentRuntime, config: EdgeConfig, process: ProcessInstance) -> None:
    indices = worker_slices(config)[(process.process, process.shard)]
    register_workers(
        runtime, plan_of(config), prepared_llm(config.models.compaction), indices=indices
    )


class ClearingDestination:
    """A destination that also clears the participant's context when they leave.

    The router calls ``participant_left`` after it cancelled and drained the
    participant's turns, so nothing streaming can record into the cleared context.
    """

    def __init__(self, agent: RoutableAgent, context: ContextManager) -> None:
        self.agent = agent
        self.context = context

    def routing_aid(self, participant_id: str) -> RoutingAid | Awaitable[RoutingAid]:
        return self.agent.routing_aid(participant_id)

    async def admit(self, turn, *, focused: bool):
        return await self.agent.admit(turn, focused=focused)

    async def answer(self, turn, *, started):
        return await self.agent.answer(turn, started=started)

    async def release(self, participant_id: str) -> None:
        await self.agent.release(participant_id)

    async def participant_left(self, participant_id: str) -> None:
        """The agent forgets the participant, then their context is cleared (also when the
        agent failed to: its error still reaches the router's confirmation)."""
        try:
            await self.agent.participant_left(participant_id)
        finally:
            await self.context.clear(participant_id)


SHUTDOWN_GRACE_SHARE = 0.7
"""Of ``supervisor.shutdown_timeout_s``, the share the router and each destination let
answers in flight finish on SIGTERM before they cancel them (each gets its final frame)."""


def conversation_role(runtime: AgentRuntime, config: EdgeConfig, process: ProcessInstance) -> None:
    plan = plan_of(config)
    context = ContextManager(
        prepared_llm(config.models.compaction),
        **config.context.manager_kwargs(),
        compaction_workers=plan.compaction_workers,
        section_hosts=plan.section_hosts,
        deployment="split",
    )
    runtime.register("context", context.subscriber())
    summarizer: WorkerSummarizer | None = None
    grace = SHUTDOWN_GRACE_SHARE * config.supervisor.shutdown_timeout_s
    for name, destination in config.destinations.items():
        if destination.kind == "realtime":
            from .realtime_destination import build_realtime  # the realtime extra

            realtime = build_realtime(runtime, name, destination, context=context, plan=plan)
            served = ClearingDestination(realtime, context)
            runtime.register(f"{name}-server", serve(name, served, shutdown_grace_s=grace))
            continue
        if destination.kind == "tools":
            if summarizer is None:
                summarizer = runtime.register("tools-summarizer", WorkerSummarizer(plan))
            tools = ToolAgent(
                create_llm(destination.model or config.models.answers),
                context=context,
                runtime=runtime,
                output_topic=VOICE_OUTPUT_TOPIC,
                servers=destination.tool_servers,
                instructions=destination.instructions,
                system_prompt=destination.system_prompt,
                routing=RoutingAid(destination.description, keywords=tuple(destination.keywords)),
                max_iterations=destination.max_iterations,
                tool_timeout_s=destination.tool_timeout_s,
                compactor=build_compactor(config, name),
                summarize=summarizer,
                transcripts=name,
            )
            runtime.register(f"{name}-server", serve(name, ClearingDestination(tools, context)))
            runtime.register(f"{name}-compact", CompactServer(name, tools))
            runtime.register(f"{name}-transcript", TranscriptEditServer(name, tools))
            continue
        conversation = Conversation(
            prepared_llm(destination.model or config.models.answers),
            context=context,
            instructions=destination.instructions,
            system_prompt=destination.system_prompt,
            routing=RoutingAid(destination.description, keywords=tuple(destination.keywords)),
            runtime=runtime,
            output_topic=VOICE_OUTPUT_TOPIC,
        )
        agent: RoutableAgent = ClearingDestination(conversation, context)
        runtime.register(f"{name}-server", serve(name, agent, shutdown_grace_s=grace))


def router_role(runtime: AgentRuntime, config: EdgeConfig, process: ProcessInstance) -> None:
    dead_after = config.router.destination_dead_after_s
    destinations = {
        name: runtime.register(
            f"{name}-proxy", remote(name, dead_after_s=dead_after, output_topic=VOICE_OUTPUT_TOPIC)
        )
        for name in config.destinations
    }
    choices: dict[str, Callable[[], DecisionService]] = {
        "first": lambda: SingleDestination(),
        "rules": lambda: KeywordDecisions(),
        "llm": lambda: LLMDecisions(prepared_llm(config.models.routing)),
    }
    decisions = choices[config.router.decisions]()
    options: dict[str, Any] = (
        {}
        if config.router.history_limit is None
        else {"history_limit": config.router.history_limit}
    )
    if any("renderer" in spec.roles for spec in config.processes.values()):
        options["playback_topic"] = PLAYBACK_STAGES_TOPIC  # records wait for its stages
    endpoint = traces_endpoint(config.telemetry.otlp_endpoint)
    exporter = register_trace_exporter(runtime, endpoint) if endpoint is not None else None
    router = runtime.register(
        "router",
        AgentRouter(
            destinations,
            decisions,
            default=config.router.default or next(iter(config.destinations), None),
            query_topic=QUERY_TOPIC,
            output_topic=VOICE_OUTPUT_TOPIC,
            interrupted_topic=INTERRUPTED_TOPIC,
            shutdown_grace_s=SHUTDOWN_GRACE_SHARE * config.supervisor.shutdown_timeout_s,
            **options,
        ),
    )
    if exporter is not None:
        router.record_observers.append(exporter)


def register_trace_exporter(runtime: AgentRuntime, endpoint: str) -> Callable[[Any], None]:
    """Register a ``TraceExporter`` sending to ``endpoint`` (before the router, so it stops
    after it) and return its ``observe``; the exporter is imported only when a collector is
    named."""
    from .otlp import TraceExporter

    return runtime.register("trace-exporter", TraceExporter(endpoint)).observe


def renderer_role(runtime: AgentRuntime, config: EdgeConfig, process: ProcessInstance) -> None:
    sink: Sink = ConsoleSink()
    if config.voice.speech_out:
        from xrmq.actors.voice.builders import speech_out_sink  # numpy: the voice extra

        sink = speech_out_sink(runtime, config.voice)
    runtime.register(
        "renderer",
        VoiceRenderer(
            sink,
            query_topic=QUERY_TOPIC,
            interrupted_topic=INTERRUPTED_TOPIC,
            sentences=config.voice.speech_out,
            stages_topic=PLAYBACK_STAGES_TOPIC,
        ),
    )


def voice_role(runtime: AgentRuntime, config: EdgeConfig, process: ProcessInstance) -> None:
    """The keyed ``voice`` kind (one ``VoiceInput`` per participant on ``audio.in``, sharded
    over the process's replicas) with the recognizer ``[voice]`` names, loaded before the
    process reports ready; and, when context topics are configured, a split
    ``ContextManager`` replica whose ``blocks()`` bias the recognizer."""
    # the voice extra (numpy, faster-whisper), imported only here
    from xrmq.actors.voice.builders import build_stt, voice_settings
    from xrmq.actors.voice.listener import register_voice_input
    from xrmq.actors.voice.stt import WhisperSTT

    stt = build_stt(config.voice)
    if isinstance(stt, WhisperSTT):
        stt.load()  # once per process, before it reports ready
    context = None
    if config.voice.context_bias and config.context.topics:
        manager = ContextManager(
            create_llm(config.models.compaction),
            **config.context.manager_kwargs(),
            compaction_workers=plan_of(config).compaction_workers,
            deployment="split",
        )
        runtime.register("voice-context", manager.subscriber())
        context = manager.blocks
    register_voice_input(
        runtime,
        stt,
        settings=voice_settings(config.voice),
        context=context,
        shard=process.shard,
        shards=process.shards,
    )


BUILTIN_ROLES = {
    "context": context_role,
    "compaction": compaction_role,
    "conversation": conversation_role,
    "router": router_role,
    "renderer": renderer_role,
    "voice": voice_role,
}


def build_compactor(config: EdgeConfig, name: str) -> CompactorAbstract:
    """Destination ``name``'s compactor: its ``compactor`` class built without arguments,
    else ``AutoCompactor`` at ``auto_compact.token_threshold``; ``auto_compact.enabled =
    false`` switches either off."""
    destination = config.destinations[name]
    settings = destination.auto_compact
    if destination.compactor is None:
        return AutoCompactor(token_threshold=settings.token_threshold, enabled=settings.enabled)
    try:
        compactor = resolve_compactor(destination.compactor, config_base(config))()
    except LookupError as error:
        raise ConfigError(config.source, f"destinations.{name}.compactor", str(error)) from None
    if not settings.enabled:
        compactor.enabled = False
    return compactor
