"""The built-in roles of the edge box: the conversation stack split over processes.

- ``context``: the context section actors (one dialogue section per participant,
  sharded over the process's replicas, and one actor per context topic on replica 0).
- ``compaction``: compaction workers; each replica hosts its own slice of the pool.
- ``conversation``: one ``Conversation`` per configured destination, served on the bus
  under the destination's name, over one split ``ContextManager`` (its replica of the
  section views). A destination's ``participant_left`` also clears the participant's
  context: the router calls it after cancelling and draining that participant's turns,
  which is when docs/context.md ("Lifecycle") says the context may be cleared.
- ``router``: the ``AgentRouter`` actor on the query, interrupted and participant topics,
  reaching every destination through a remote proxy.
- ``renderer``: a ``VoiceRenderer`` with a console sink on the voice output topic.

Every process derives the same ``ContextPlan`` from the config, so the section actors,
the workers and the managers agree on topics, budgets and the worker pool.
"""

from __future__ import annotations

from xrmq.actors.context import ContextManager, context_plan, register_sections, register_workers
from xrmq.actors.context.plan import ContextPlan
from xrmq.actors.conversation import Conversation
from xrmq.actors.models import create_llm
from xrmq.actors.routing import AgentRouter, KeywordDecisions, LLMDecisions, SingleDestination, remote, serve
from xrmq.actors.routing.agent import RoutableAgent
from xrmq.actors.runtime import AgentRuntime
from xrmq.actors.voice import ConsoleSink, VoiceRenderer
from xrmq.schemas import RoutingAid
from xrmq.topics import INTERRUPTED_TOPIC, QUERY_TOPIC, VOICE_OUTPUT_TOPIC

from .config import EdgeConfig, ProcessInstance


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


def plan_of(config: EdgeConfig) -> ContextPlan:
    """The context plan every process of ``config`` shares."""
    workers = sum(len(indices) for indices in worker_slices(config).values())
    return context_plan(**config.context.manager_kwargs(), compaction_workers=max(workers, 1))


def context_role(runtime: AgentRuntime, config: EdgeConfig, process: ProcessInstance) -> None:
    topics = None if process.shard == 0 else []
    register_sections(runtime, plan_of(config), shard=process.shard, shards=process.shards, topics=topics)


def compaction_role(runtime: AgentRuntime, config: EdgeConfig, process: ProcessInstance) -> None:
    indices = worker_slices(config)[(process.process, process.shard)]
    register_workers(runtime, plan_of(config), create_llm(config.models.compaction), indices=indices)


class ClearingDestination:
    """A destination that also clears the participant's context when they leave.

    The router calls ``participant_left`` after it cancelled and drained the
    participant's turns, so nothing streaming can record into the cleared context.
    """

    def __init__(self, agent: Conversation, context: ContextManager) -> None:
        self.agent = agent
        self.context = context

    def routing_aid(self, participant_id: str) -> RoutingAid:
        return self.agent.routing_aid(participant_id)

    async def admit(self, turn, *, focused: bool):
        return await self.agent.admit(turn, focused=focused)

    async def answer(self, turn, *, started):
        return await self.agent.answer(turn, started=started)

    async def release(self, participant_id: str) -> None:
        await self.agent.release(participant_id)

    async def participant_left(self, participant_id: str) -> None:
        await self.agent.participant_left(participant_id)
        await self.context.clear(participant_id)


def conversation_role(runtime: AgentRuntime, config: EdgeConfig, process: ProcessInstance) -> None:
    plan = plan_of(config)
    context = ContextManager(create_llm(config.models.compaction), **config.context.manager_kwargs(),
                             compaction_workers=plan.compaction_workers, deployment="split")
    runtime.register("context", context.subscriber())
    for name, destination in config.destinations.items():
        conversation = Conversation(
            create_llm(destination.model or config.models.answers),
            context=context,
            instructions=destination.instructions,
            system_prompt=destination.system_prompt,
            routing=RoutingAid(destination.description, keywords=tuple(destination.keywords)),
            runtime=runtime,
            output_topic=VOICE_OUTPUT_TOPIC,
        )
        agent: RoutableAgent = ClearingDestination(conversation, context)
        runtime.register(f"{name}-server", serve(name, agent))


def router_role(runtime: AgentRuntime, config: EdgeConfig, process: ProcessInstance) -> None:
    destinations = {name: runtime.register(f"{name}-proxy", remote(name)) for name in config.destinations}
    decisions = {
        "first": lambda: SingleDestination(),
        "rules": lambda: KeywordDecisions(),
        "llm": lambda: LLMDecisions(create_llm(config.models.routing)),
    }[config.router.decisions]()
    options = {} if config.router.history_limit is None else {"history_limit": config.router.history_limit}
    runtime.register("router", AgentRouter(
        destinations, decisions, default=config.router.default or next(iter(config.destinations), None),
        query_topic=QUERY_TOPIC, output_topic=VOICE_OUTPUT_TOPIC, interrupted_topic=INTERRUPTED_TOPIC, **options,
    ))


def renderer_role(runtime: AgentRuntime, config: EdgeConfig, process: ProcessInstance) -> None:
    runtime.register("renderer", VoiceRenderer(ConsoleSink(), query_topic=QUERY_TOPIC,
                                                interrupted_topic=INTERRUPTED_TOPIC))


BUILTIN_ROLES = {
    "context": context_role,
    "compaction": compaction_role,
    "conversation": conversation_role,
    "router": router_role,
    "renderer": renderer_role,
}
