"""The manager's requests to the section hosts behind ``dump``, ``load`` and ``compact``.

These are the context operations docs/tools.md offers (``/dump``, ``/load``,
``/compact``): each asks every section host (or the participant's sections) over a
running runtime and waits for their answers, bounded by the deployment's timeouts. The
facade (``ContextManager``) checks the arguments and finds the runtime; the state they
touch is the replica's (``replication``) and the write table's (``writes``).

- ``dump_context``: each host's section states, page by page within the bus's message
  limit, merged into one versioned ``dump.ContextDump``.
- ``load_context``: one ``LoadSection`` per dumped section, acknowledged like any write
  (so journaled, and re-sent to a host that restarts before it acknowledged).
- ``compact_context``: one ``CompactSection`` per target section, each answered by the
  section's report once its run ended.
"""

from __future__ import annotations

import asyncio
from typing import Any

from xrmq.actors.runtime import AgentRuntime
from xrmq.schemas._validation import check_name
from xrmq.topics import Topic

from .dump import ContextDump, ParticipantDump, encode_dump
from .guard import MODEL_ATTEMPTS
from .manual import MAKERS, CompactOutcome, CompactStatus, SectionOutcome
from .messages import CompactReport, CompactSection, HostDump, HostSync, LoadSection
from .plan import ContextPlan
from .replication import DIALOGUE_KEY, ContextReplica
from .writes import Writes


async def dump_context(
    runtime: AgentRuntime, plan: ContextPlan, participant_id: str | None, *, source: str
) -> bytes:
    """Every participant's context (or one participant's), as the section hosts hold it."""
    hosts = await asyncio.gather(
        *(
            _dump_host(runtime, plan, host, participant_id, source)
            for host in range(plan.section_hosts)
        )
    )
    merged: dict[str, list] = {}
    for host_participants in hosts:
        for participant in host_participants:
            merged.setdefault(participant.participant_id, []).extend(participant.sections)
    participants = tuple(
        ParticipantDump(
            pid,
            tuple(sorted(sections, key=lambda dump: (dump.kind != "dialogue", dump.section))),
        )
        for pid, sections in sorted(merged.items())
    )
    return encode_dump(ContextDump(participants))


async def _dump_host(
    runtime: AgentRuntime, plan: ContextPlan, host: int, participant_id: str | None, source: str
) -> list[ParticipantDump]:
    """One host's section states (of one participant), page by page."""
    participants: list[ParticipantDump] = []
    after: str | None = None
    while True:
        page = await runtime.ask(
            plan.topics.host_dump(host),
            HostSync(participant_id, after=after, page_bytes=runtime.max_message_bytes),
            reply_type=HostDump,
            source=source,
            timeout=plan.control_timeout_s,
        )
        participants.extend(page.participants)
        if page.next_after is None:
            return participants
        after = page.next_after


async def load_context(
    dump: ContextDump,
    plan: ContextPlan,
    manager_id: str,
    replica: ContextReplica,
    writes: Writes,
    log: Any,
) -> int:
    """Send every dumped section this deployment configures to its section; return how
    many, once all acknowledged. Another topic or mode is skipped with a warning."""
    topics = plan.topics
    modes = {section.spec.name: section.spec.kind for section in plan.config.topics}
    waits: list[asyncio.Future[None]] = []
    seqs: list[int] = []
    for participant in dump.participants:
        pid = check_name(participant.participant_id, "participant_id")
        for section in participant.sections:
            topic: Topic[LoadSection]
            if section.kind == "dialogue":
                topic, key = topics.dialogue_load, DIALOGUE_KEY
                replica.replica(pid).identities.update(section.identities)
            elif modes.get(section.section) == section.kind:
                topic, key = topics.topic_load(section.section), section.section
            else:
                log.warning(
                    "context.load_skipped",
                    participant=pid,
                    section=section.section,
                    kind=section.kind,
                )
                continue
            seq = writes.next_seq()
            seqs.append(seq)
            waits.append(writes.expect(seq, key, pid))
            writes.send(topic, LoadSection(manager_id, seq, section), pid, key)
    try:
        await asyncio.wait_for(asyncio.gather(*waits), plan.control_timeout_s)
    except TimeoutError:
        raise TimeoutError(
            f"load: the sections did not apply it within {plan.control_timeout_s}s"
        ) from None
    finally:
        for seq in seqs:
            writes.settle(seq, resend=True)
    return len(waits)


def compact_targets(plan: ContextPlan, section: str | None) -> list[tuple[str, Topic]]:
    """The sections a manual compaction of ``section`` asks, with their compact topics:
    the dialogue or one incremental topic, or (None) the dialogue and every incremental
    topic; ``ValueError`` for any other name (a summary topic is never compacted)."""
    topics = plan.topics
    dialogue = plan.config.dialogue.spec.name
    incremental = [s.spec.name for s in plan.config.topics if s.spec.kind == "incremental"]
    if section is None:
        targets: list[tuple[str, Topic]] = [(dialogue, topics.dialogue_compact)]
        return targets + [(name, topics.topic_compact(name)) for name in incremental]
    if section == dialogue:
        return [(section, topics.dialogue_compact)]
    if section in incremental:
        return [(section, topics.topic_compact(section))]
    raise ValueError(
        f"section: must be 'dialogue' or an incremental topic "
        f"({', '.join(incremental) or 'none configured'}), got {section!r}"
    )


async def compact_context(
    runtime: AgentRuntime,
    plan: ContextPlan,
    manager_id: str,
    writes: Writes,
    participant_id: str,
    targets: list[tuple[str, Topic]],
    *,
    source: str,
) -> CompactOutcome:
    """Ask each target section to compact the participant now; its reports as the outcome."""
    futures: list[asyncio.Future[CompactReport]] = []
    seqs = []
    for _, topic in targets:
        seq = writes.next_seq()
        seqs.append(seq)
        futures.append(writes.expect_report(seq))
        runtime.send(
            topic, CompactSection(manager_id, seq), participant_id=participant_id, source=source
        )
    # Every worker may time out on a job; guarded, a run may also take the failure ladder's
    # model requests for the same material one after the other before the fallback.
    attempts = MODEL_ATTEMPTS if plan.summary_guards else 1
    timeout = (
        plan.compaction_timeout_s * (plan.compaction_workers + 1) * attempts
        + plan.control_timeout_s
    )
    try:
        reports = await asyncio.wait_for(asyncio.gather(*futures), timeout)
    except TimeoutError:
        raise TimeoutError(f"compact: no report from the sections within {timeout:g}s") from None
    finally:
        for seq in seqs:
            writes.settle(seq)
    return CompactOutcome(
        participant_id,
        tuple(
            SectionOutcome(
                name,
                CompactStatus(report.status),
                report.detail,
                tuple(maker for maker in MAKERS if maker in report.made_by),
            )
            for (name, _), report in zip(targets, reports)
        ),
    )
