"""Run an eval session through the context engine and ask the probes.

Each participant's events are written to three sections of the pure engine
(``Section``: the same state machine the section actors run) and every compaction the
engine asks for is sent, as the compaction workers send it (``workers.compact``), to the
compaction model before the next event, so a run is deterministic for a deterministic
model. The runner tracks which entry holds each planted statement and how many summary
rewrites it has been through since a summary absorbed it (its compaction depth).

At each probe point (the end of each third of the session, by default) every fact
stated by then whose statements all live solely in a summary (for a cross-section
fact: whose dialogue statement does) is probed, so a fact is asked about after a few
summary rewrites and again after many: the probe goes to the
answers model in the conversation's own request layout (``answer_messages`` over the
participant's rendered blocks), and both the answer and the rendered context are scored.
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping

import msgspec

from xrmq.actors.context.compaction import CompactionRequest
from xrmq.actors.context.engine import Section
from xrmq.actors.context.render import render_participant
from xrmq.actors.context.salience import summary_problem
from xrmq.actors.context.state import (
    ApplyStatus,
    CompactionSettings,
    SectionSpec,
    SectionState,
)
from xrmq.actors.context.workers import compact
from xrmq.actors.conversation import answer_messages, context_message, default_system_prompt
from xrmq.actors.models import LLMService
from xrmq.schemas import CompactionPrompts, ContextBlock

from .eval_session import Event, Fact, Session, SessionConfig
from .scoring import Score, score

SECTION_ORDER = ("dialogue", "notes", "scene")
"""The manager renders the dialogue first, then topics in configured order."""


class ProbeResult(msgspec.Struct, frozen=True, kw_only=True):
    """One probe: the fact, how deep in summaries it was, the answer and its scores."""

    fact_id: str
    participant_id: str
    checkpoint: int
    """Which probe point asked it (0 first; the last is the session's end)."""
    kind: str
    question: str
    value: str
    superseded: tuple[str, ...]
    depth: int
    """Summary rewrites the fact's current statement went through (its dialogue
    statement's, for a cross-section fact whose update is still verbatim)."""
    oversized: bool
    answer: str
    answer_score: Score
    context_score: Score
    """The same scorer over the rendered context: what compaction kept, whatever the
    answers model made of it."""


class SectionStats(msgspec.Struct, kw_only=True):
    """What compaction did in one section of one participant."""

    participant_id: str
    section: str
    budget_bytes: int
    limit_bytes: int
    compactions: int = 0
    """Summary rewrites (applied or clipped results)."""
    statuses: dict[str, int] = {}
    summary_bytes: list[int] = []
    """Size of the summary after each rewrite."""
    cut_off: int = 0
    """Compaction replies cut off at their output limit (finish reason ``length``)."""
    frozen: int = 0
    """Model summaries the summary guards refused as the previous summary again."""
    lossy: int = 0
    """Model summaries the summary guards refused for dropping the entries' values."""
    fallbacks: int = 0
    """Batches compacted by the extractive fallback instead of the model."""
    frozen_accepted: int = 0
    """Model summaries accepted although ``summary_problem`` calls them frozen: what an
    unguarded run let through (0 with the guards, which refuse them)."""
    lossy_accepted: int = 0
    """Model summaries accepted although ``summary_problem`` calls them lossy."""


class RunResult(msgspec.Struct, kw_only=True):
    """One prompts variant's run over one session."""

    variant: str
    probes: list[ProbeResult]
    sections: list[SectionStats]
    skipped_facts: list[str]
    """Facts not probed at the end because a statement was still verbatim."""
    contexts: dict[str, list[tuple[ContextBlock, ...]]]
    """Each participant's rendered blocks at each probe point, as the probes saw them."""
    calls: dict[str, int] = {}
    """Model calls by kind (``compact.<section>``, ``condense``, ``answer``), over all
    participants. Their latency is the call log's (``eval_cli``)."""


def sections_for(
    config: SessionConfig, prompts: CompactionPrompts, *, guarded: bool = True
) -> dict[str, Section]:
    """The three sections of a session, with the given compaction prompts, and the summary
    guards if ``guarded`` (``CompactionSettings.guarded``)."""
    settings = CompactionSettings(config.compaction_input_budget_bytes, prompts, guarded=guarded)
    return {
        "dialogue": Section(
            SectionSpec("dialogue", "dialogue", config.dialogue_budget_bytes), settings
        ),
        "notes": Section(SectionSpec("notes", "incremental", config.notes_budget_bytes), settings),
        "scene": Section(SectionSpec("scene", "summary", config.scene_budget_bytes), settings),
    }


class _Participant:
    """One participant's sections, states and statement bookkeeping."""

    def __init__(self, pid: str, sections: Mapping[str, Section], calls: dict[str, int]) -> None:
        self.pid = pid
        self.calls = calls
        self.sections = sections
        self.states: dict[str, SectionState] = {
            name: section.new_state(f"{pid}.{name}") for name, section in sections.items()
        }
        self.stats = {
            name: SectionStats(
                participant_id=pid,
                section=name,
                budget_bytes=s.spec.budget_bytes,
                limit_bytes=s.spec.summary_limit_bytes,
            )
            for name, s in sections.items()
        }
        self.entry_of: dict[int, tuple[str, int]] = {}
        """Event index -> (section, entry id) of the entry that event wrote."""
        self.absorbed_at: dict[tuple[str, int], int] = {}
        """(section, entry id) -> the section's rewrite count when a summary absorbed it."""

    def write(self, index: int, event: Event) -> str:
        section = self.sections[event.section]
        state = self.states[event.section]
        self.entry_of[index] = (event.section, state.next_entry_id)
        if event.section == "dialogue":
            section.record_exchange(
                state,
                event.request,
                event.answer,
                timestamp_us=event.timestamp_us,
                exchange_id=index,
            )
        elif section.spec.kind == "incremental":
            section.append_update(state, event.text, timestamp_us=event.timestamp_us)
        else:
            section.replace_state(state, event.text, timestamp_us=event.timestamp_us)
        return event.section

    async def compact(self, name: str, llm: LLMService) -> None:
        """Run every compaction the section asks for now, to the end."""
        section, state, stats = self.sections[name], self.states[name], self.stats[name]
        before = {entry.entry_id for entry in state.entries}
        while True:
            # A guarded section may compact by its fallback inside next_compaction (backoff).
            request = section.next_compaction(state)
            if request is not None:
                await self._call(section, state, stats, request, llm)
            after = {entry.entry_id for entry in state.entries}
            if before - after:
                stats.compactions += 1
                stats.summary_bytes.append(len(state.summary.encode()))
                for entry_id in before - after:
                    self.absorbed_at[(name, entry_id)] = stats.compactions
            before = after
            if request is None:
                break

    async def _call(
        self,
        section: Section,
        state: SectionState,
        stats: SectionStats,
        request: CompactionRequest,
        llm: LLMService,
    ) -> None:
        """Send ``request`` to the model, apply its result, and count what happened."""
        kind = "condense" if request.kind == "condense" else f"compact.{section.spec.name}"
        previous = state.summary
        assert state.pending is not None
        covered = set(state.pending.entry_ids)
        texts = [entry.text for entry in state.entries if entry.entry_id in covered]
        result = await compact(llm, request)
        self.calls[kind] = self.calls.get(kind, 0) + 1
        status = section.apply_result(state, result)
        stats.statuses[status.value] = stats.statuses.get(status.value, 0) + 1
        stats.cut_off += result.finish_reason == "length"
        if request.kind == "compact" and status in (
            ApplyStatus.APPLIED,
            ApplyStatus.CONDENSE_DUE,
        ):
            problem = summary_problem(
                result.text.strip(), previous, texts, section.spec.summary_limit_bytes
            )
            stats.frozen_accepted += problem == "frozen"
            stats.lossy_accepted += problem == "lossy"

    def depth(self, event_index: int) -> int:
        """Summary rewrites the statement of ``event_index`` has been through (0: verbatim)."""
        name, entry_id = self.entry_of[event_index]
        absorbed = self.absorbed_at.get((name, entry_id))
        if absorbed is None:
            return 0
        return self.stats[name].compactions - absorbed + 1

    def finish(self) -> list[SectionStats]:
        """The sections' stats, with the guards' counters of their states."""
        for name, stats in self.stats.items():
            state = self.states[name]
            stats.frozen, stats.lossy = state.frozen_summaries, state.lossy_summaries
            stats.fallbacks = state.fallbacks
        return list(self.stats.values())

    def context(self) -> tuple[ContextBlock, ...]:
        return render_participant(
            [self.sections[name].render(self.states[name]).blocks for name in SECTION_ORDER]
        )


def _probe_depth(participant: _Participant, fact: Fact) -> int | None:
    """The fact's compaction depth, or ``None`` if it does not live solely in a summary."""
    depths = [participant.depth(s.event_index) for s in fact.statements]
    if fact.kind == "cross_section":
        first, current = depths[0], depths[-1]
        return None if first == 0 else (current or first)
    return None if 0 in depths else depths[-1]


class _Outcome(msgspec.Struct):
    probes: list[ProbeResult]
    stats: list[SectionStats]
    skipped: list[str]
    contexts: list[tuple[ContextBlock, ...]]


def _checkpoints(events: tuple[Event, ...], count: int) -> list[int]:
    """Event indices after which probes are asked: the end of each of ``count`` equal
    parts of the session (the last is the session's end)."""
    return sorted({len(events) * k // count - 1 for k in range(1, count + 1)})


async def _run_participant(
    pid: str,
    events: tuple[Event, ...],
    facts: list[Fact],
    sections: Mapping[str, Section],
    compaction_llm: LLMService,
    answers_llm: LLMService,
    probe_points: int,
    calls: dict[str, int],
) -> _Outcome:
    participant = _Participant(pid, sections, calls)
    system = default_system_prompt()
    probes: list[ProbeResult] = []
    skipped: list[str] = []
    contexts: list[tuple[ContextBlock, ...]] = []
    checkpoints = _checkpoints(events, probe_points)
    for index, event in enumerate(events):
        await participant.compact(participant.write(index, event), compaction_llm)
        if index not in checkpoints:
            continue
        blocks = participant.context()
        contexts.append(blocks)
        now_us = event.timestamp_us + 60_000_000
        context_text = context_message(blocks, now_us)
        final = index == checkpoints[-1]
        for fact in facts:
            if fact.statements[-1].event_index > index:
                continue  # not (fully) stated yet
            depth = _probe_depth(participant, fact)
            if depth is None:
                if final:
                    skipped.append(fact.fact_id)
                continue
            completion = await answers_llm.complete(
                answer_messages(system, blocks, now_us, fact.question)
            )
            calls["answer"] = calls.get("answer", 0) + 1
            probes.append(
                ProbeResult(
                    fact_id=fact.fact_id,
                    participant_id=pid,
                    checkpoint=len(contexts) - 1,
                    kind=fact.kind,
                    question=fact.question,
                    value=fact.value,
                    superseded=fact.superseded,
                    depth=depth,
                    oversized=fact.oversized,
                    answer=completion.text,
                    answer_score=score(completion.text, fact),
                    context_score=score(context_text, fact),
                )
            )
    return _Outcome(probes, participant.finish(), skipped, contexts)


async def run_variant(
    session: Session,
    variant: str,
    prompts: CompactionPrompts,
    *,
    compaction_llm: LLMService,
    answers_llm: LLMService,
    concurrency: int = 4,
    guarded: bool = True,
) -> RunResult:
    """Run ``session`` with ``prompts``; participants run concurrently, at most
    ``concurrency`` at once (each participant's own calls stay in order); ``guarded``
    (the default, as a box's) keeps the summary guards on."""
    sections = sections_for(session.config, prompts, guarded=guarded)
    gate = asyncio.Semaphore(concurrency)
    calls: dict[str, int] = {}

    async def one(pid: str) -> _Outcome:
        async with gate:
            facts = [fact for fact in session.facts if fact.participant_id == pid]
            return await _run_participant(
                pid,
                session.events[pid],
                facts,
                sections,
                compaction_llm,
                answers_llm,
                session.config.probe_points,
                calls,
            )

    results = await asyncio.gather(*(one(pid) for pid in session.events))
    return RunResult(
        variant=variant,
        probes=[p for outcome in results for p in outcome.probes],
        sections=[s for outcome in results for s in outcome.stats],
        skipped_facts=[f for outcome in results for f in outcome.skipped],
        contexts={
            pid: outcome.contexts for pid, outcome in zip(session.events, results, strict=True)
        },
        calls=dict(sorted(calls.items())),
    )
