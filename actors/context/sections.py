"""Hosting the context's section actors in a runtime: ``register_sections``.

The section actors (``section_actors``) are the context's state: the dialogue of each
participant, and one actor per configured context topic. A context process (or the
manager's own runtime, in the embedded deployment) registers them with
``register_sections``, which also restores a journal's states into them and returns
the shard's ``ContextHost`` (``context_host``). The names here are the ones every
process of a deployment agrees on: the keyed kind of the dialogue actors and the
registered names of the topic actors and of the host.
"""

from __future__ import annotations

from collections.abc import Sequence

from xrmq.actors.runtime import AgentRuntime

from .context_host import ContextHost
from .journal import ContextStore
from .plan import ContextPlan
from .section_actors import DialogueSectionActor, TopicSectionActor


def dialogue_kind(name: str) -> str:
    """The keyed kind under which a runtime hosts the dialogue actors of ``name``."""
    return f"{name}.dialogue"


def topic_actor_name(name: str, topic: str) -> str:
    """The registered name of the section actor of ``topic``."""
    return f"{name}.topic.{topic}"


def host_actor_name(name: str, shard: int) -> str:
    """The registered name of the ``ContextHost`` of ``shard``."""
    return f"{name}.host.{shard}"


def register_sections(
    runtime: AgentRuntime,
    plan: ContextPlan,
    *,
    name: str = "context",
    shard: int = 0,
    shards: int = 1,
    topics: Sequence[str] | None = None,
    store: ContextStore | None = None,
    orphans: Sequence[ContextStore] = (),
) -> ContextHost:
    """Host section actors in ``runtime`` (before it starts); return its ``ContextHost``.

    Registers the keyed dialogue kind ``<name>.dialogue`` for the participants whose
    stable hash falls in ``shard`` of ``shards``, and one actor ``<name>.topic.<topic>``
    per configured topic (``topics`` selects some, for spreading topics over processes;
    host each topic in exactly one process), and the host ``<name>.host.<shard>``
    (section host ``shard`` of ``plan.section_hosts``). With ``store`` (an opened
    journal, ``store.open_store``) every change is journaled and the journal's
    states are restored at start; dialogues of participants another shard owns (the
    shard count changed), and every dialogue in ``orphans`` (journals of shards that no
    longer exist, opened), are migrated to their owners (``ContextHost``).
    """
    names = [section.spec.name for section in plan.config.topics]
    chosen = names if topics is None else list(topics)
    unknown = [topic for topic in chosen if topic not in names]
    if unknown:
        raise ValueError(f"topics: not configured topics: {unknown}")
    if not 0 <= shard < plan.section_hosts:
        raise ValueError(
            f"shard: section host {shard} is outside the plan's {plan.section_hosts} section hosts"
        )
    t = plan.topics
    kind = dialogue_kind(name)
    actors = [
        TopicSectionActor(plan, section, store=store, host=shard)
        for section in plan.config.topics
        if section.spec.name in chosen
    ]
    host = ContextHost(plan, kind, shard, actors, store, shards=shards, orphans=orphans)
    if store is not None:
        by_name = {actor.host.journal_name: actor for actor in actors}
        for (pid, section_name), recovered in store.recovered.items():
            actor = by_name.get(section_name)
            if actor is not None:
                actor.host.restore(pid, recovered)
        for actor in actors:
            actor.host.residency.adopt_journal()
    runtime.register_keyed(
        kind,
        DialogueSectionActor,
        factory=lambda key: DialogueSectionActor(
            key,
            plan,
            kind,
            store=store,
            host=shard,
            recovered=host.take(key),
            held=host.dialogues_held,
            lost=host.dialogue_lost,
        ),
        shard=shard,
        shards=shards,
        handlers={
            t.dialogue_write: DialogueSectionActor.on_write,
            t.dialogue_result: DialogueSectionActor.on_result,
            t.dialogue_clear: DialogueSectionActor.on_clear,
            t.dialogue_load: DialogueSectionActor.on_load,
            t.dialogue_migrate: DialogueSectionActor.on_migrate,
            t.dialogue_compact: DialogueSectionActor.on_compact,
        },
    )
    for actor in actors:
        runtime.register(topic_actor_name(name, actor.host.section.spec.name), actor)
    runtime.register(host_actor_name(name, shard), host)
    return host
