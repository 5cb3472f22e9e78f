"""``xrmq turns``: each turn's stage breakdown as it ends, and p50/p95 per stage.

The router publishes one ``TurnRecord`` per turn on ``xrmq.turns`` (``schemas/turns.py``);
this command subscribes and prints each as it arrives (``--participant``: one participant's
only). No history is stored on the bus, so it shows the turns that end while it watches:
``--count N`` stops after N turns, ``--follow`` (the default without ``--count``) runs
until Ctrl-C. On a terminal a turn is a compact waterfall, one line per stage it passed:
the time since the query, the step from the stage before, and a bar placing the step in
the turn; when it stops it prints p50/p95 of every step over the last ``--last`` turns.
``--json`` prints each record as one JSON object a line (absent stages left out), and no
summary.

``TurnStats`` is pure (it keeps the last turns, and per participant the last turn, the
query-to-first-chunk times and the tokens and cost so far); ``xrmq top``'s conversation
pane is ``TurnStats.pane``.
"""

from __future__ import annotations

import asyncio
import math
import os
import signal
import sys
from collections import deque
from collections.abc import Iterable, Sequence
from typing import TextIO

import msgspec

from xrmq.actors.runtime import Agent, AgentRuntime, RuntimeContext, subscribe
from xrmq.actors.runtime.security.keys import client_credentials
from xrmq.schemas import STAGES, TurnRecord
from xrmq.topics import TURNS_TOPIC

DEFAULT_LAST = 100
"""Turns the percentiles are taken over by default (``--last``)."""
BAR_WIDTH = 30
FIRST_CHUNK = "query->first_chunk"
"""The headline a user feels: from the query to the reply's first chunk."""


def steps(record: TurnRecord) -> list[tuple[str, float, float]]:
    """The stages the turn passed, in order, as (stage, ms since its first stage, ms since the
    stage before it); a turn with no stage has none."""
    stages = record.stages()
    if not stages:
        return []
    start = next(iter(stages.values()))
    found = []
    previous = start
    for stage, at in stages.items():
        found.append((stage, (at - start) / 1000, (at - previous) / 1000))
        previous = at
    return found


def first_chunk_ms(record: TurnRecord) -> float | None:
    """Milliseconds from the query to the first chunk published, when the turn had both."""
    if record.query_us is None or record.first_chunk_us is None:
        return None
    return (record.first_chunk_us - record.query_us) / 1000


def percentile(values: Sequence[float], fraction: float) -> float:
    """The nearest-rank percentile of ``values`` (non-empty): the smallest value that at least
    ``fraction`` of them are at most."""
    ordered = sorted(values)
    rank = max(1, math.ceil(fraction * len(ordered)))
    return ordered[min(rank, len(ordered)) - 1]


def step_percentiles(records: Iterable[TurnRecord]) -> dict[str, tuple[float, float, int]]:
    """Per step (each stage, from the stage before it) and ``FIRST_CHUNK``: (p50, p95, turns)
    in milliseconds, in ``STAGES`` order, over the turns that passed it."""
    samples: dict[str, list[float]] = {}
    for record in records:
        for stage, _, step in steps(record)[1:]:
            samples.setdefault(stage, []).append(step)
        headline = first_chunk_ms(record)
        if headline is not None:
            samples.setdefault(FIRST_CHUNK, []).append(headline)
    order = [*STAGES, FIRST_CHUNK]
    return {
        name: (percentile(samples[name], 0.5), percentile(samples[name], 0.95), len(samples[name]))
        for name in order
        if name in samples
    }


def describe_usage(record: TurnRecord) -> str:
    """``152+12 tokens (estimated) $0.000021``: prompt+completion, reasoning, cost when known."""
    usage = record.usage
    if usage is None or usage.prompt_tokens is None or usage.completion_tokens is None:
        return ""
    text = f"{usage.prompt_tokens}+{usage.completion_tokens} tokens"
    if usage.reasoning_tokens:
        text += f" ({usage.reasoning_tokens} reasoning)"
    if usage.estimated:
        text += " (estimated)"
    if usage.cost_usd is not None:
        text += f" ${usage.cost_usd:.6f}"
    return text


def render_turn(record: TurnRecord) -> str:
    """One turn as a compact waterfall: a header, then a line per stage it passed."""
    head = [record.participant_id, record.turn_id[:12], record.status]
    if record.route:
        head.append(f"via {record.route}")
    if record.model:
        head.append(f"({record.model})")
    headline = first_chunk_ms(record)
    if headline is not None:
        head.append(f"first chunk {headline:.1f} ms")
    usage = describe_usage(record)
    if usage:
        head.append(usage)
    lines = ["  ".join(head)]
    if record.error:
        lines.append(f"  error: {record.error}")
    found = steps(record)
    total = max((since for _, since, _ in found), default=0.0)  # playback outlasts the end
    crossed = set(record.crossed)
    for stage, since, step in found:
        left = round(BAR_WIDTH * (since - step) / total) if total > 0 else 0
        width = max(1, round(BAR_WIDTH * step / total)) if total > 0 and step > 0 else 0
        bar = " " * left + "#" * width
        mark = " *" if stage in crossed else ""
        lines.append(f"  {stage:<14}{since:>10.1f} ms  +{step:>9.1f}  |{bar:<{BAR_WIDTH}}|{mark}")
    for call in record.tool_calls:
        took = (call.ended_us - call.started_us) / 1000
        lines.append(f"  tool {call.name} {took:.1f} ms" + (" (failed)" if call.failed else ""))
    for compaction in record.compactions:
        took = (compaction.ended_us - compaction.started_us) / 1000
        lines.append(f"  compaction {compaction.kind} {compaction.outcome} {took:.1f} ms")
    if record.context:
        sizes = ", ".join(f"{s.name} {s.bytes}/{s.budget_bytes} B" for s in record.context)
        lines.append(f"  context {sizes}")
    if crossed:
        lines.append("  (* taken in another process than the router's)")
    return "\n".join(lines) + "\n"


def render_percentiles(records: Sequence[TurnRecord]) -> str:
    """p50/p95 of every step over ``records``."""
    table = step_percentiles(records)
    if not table:
        return f"no stage times over {len(records)} turns\n"
    lines = [f"over the last {len(records)} turns (ms)       p50        p95   turns"]
    for name, (p50, p95, count) in table.items():
        lines.append(f"  {name:<26}{p50:>9.1f}  {p95:>9.1f}  {count:>6}")
    return "\n".join(lines) + "\n"


class _Participant:
    __slots__ = ("cost_usd", "first_chunks", "last", "tokens", "turns")

    def __init__(self, last: TurnRecord, window: int) -> None:
        self.last = last
        self.turns = 0
        self.tokens = 0
        self.cost_usd: float | None = None
        self.first_chunks: deque[float] = deque(maxlen=window)


class TurnStats:
    """The last ``window`` turns, and per participant the last turn, its query-to-first-chunk
    times (the last ``window``), and the tokens and cost of every turn seen."""

    def __init__(self, window: int = DEFAULT_LAST) -> None:
        if isinstance(window, bool) or not isinstance(window, int) or window < 1:
            raise ValueError("TurnStats.window: must be an int >= 1")
        self.window = window
        self.recent: deque[TurnRecord] = deque(maxlen=window)
        self._participants: dict[str, _Participant] = {}

    def observe(self, record: TurnRecord) -> None:
        self.recent.append(record)
        seen = self._participants.get(record.participant_id)
        if seen is None:
            seen = self._participants[record.participant_id] = _Participant(record, self.window)
        seen.last = record
        seen.turns += 1
        usage = record.usage
        if usage is not None:
            seen.tokens += (usage.prompt_tokens or 0) + (usage.completion_tokens or 0)
            if usage.cost_usd is not None:
                seen.cost_usd = (seen.cost_usd or 0.0) + usage.cost_usd
        headline = first_chunk_ms(record)
        if headline is not None:
            seen.first_chunks.append(headline)

    def pane(self) -> str:
        """``xrmq top``'s conversation pane: per participant, the last turn's steps, p50/p95
        of query to first chunk, and the tokens and cost so far; empty before any turn."""
        if not self._participants:
            return ""
        lines = ["conversations"]
        for participant in sorted(self._participants):
            seen = self._participants[participant]
            last = seen.last
            head = f"  {participant}  {seen.turns} turns  {seen.tokens} tokens"
            if seen.cost_usd is not None:
                head += f"  ${seen.cost_usd:.6f}"
            if seen.first_chunks:
                chunks = list(seen.first_chunks)
                head += (
                    f"  query->first chunk p50 {percentile(chunks, 0.5):.1f} ms"
                    f" p95 {percentile(chunks, 0.95):.1f} ms"
                )
            lines.append(head)
            route = f" via {last.route}" if last.route else ""
            breakdown = "  ".join(f"{stage} +{step:.1f}" for stage, _, step in steps(last)[1:])
            lines.append(f"    last: {last.status}{route}  {breakdown} (ms)")
        return "\n".join(lines) + "\n"


class _TurnWatcher(Agent):
    def __init__(self, participant: str | None, arrived: asyncio.Queue[TurnRecord]) -> None:
        self.participant = participant
        self.arrived = arrived

    @subscribe(TURNS_TOPIC)
    async def on_record(self, record: TurnRecord, ctx: RuntimeContext) -> None:
        if self.participant is None or record.participant_id == self.participant:
            self.arrived.put_nowait(record)


async def follow(
    bus: str,
    *,
    participant: str | None,
    as_json: bool,
    count: int | None,
    last: int = DEFAULT_LAST,
    out: TextIO = sys.stdout,
    status: TextIO = sys.stderr,
) -> int:
    """Print each turn record as it arrives (``count``: stop after that many; else until
    SIGINT/SIGTERM), then, in text, p50/p95 per step over the last ``last`` turns. Says
    ``xrmq turns: ready`` on ``status`` once subscribed."""
    stats = TurnStats(last)
    arrived: asyncio.Queue[TurnRecord] = asyncio.Queue()
    loop = asyncio.get_running_loop()
    keyed = client_credentials() is not None  # then its name must start with its identity's
    runtime = AgentRuntime(bus, name=None if keyed else f"turns-{os.getpid()}")
    runtime.register("turns", _TurnWatcher(participant, arrived))
    stop = asyncio.Event()
    for signum in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(signum, stop.set)
    stopping = asyncio.ensure_future(stop.wait())
    printed = 0
    try:
        async with runtime:
            print(f"xrmq turns: ready participant={participant or '*'}", file=status, flush=True)
            while count is None or printed < count:
                getting = asyncio.ensure_future(arrived.get())
                await asyncio.wait((getting, stopping), return_when=asyncio.FIRST_COMPLETED)
                if not getting.done():
                    getting.cancel()
                    break
                record = getting.result()
                stats.observe(record)
                printed += 1
                if as_json:
                    out.write(msgspec.json.encode(record).decode() + "\n")
                else:
                    out.write(render_turn(record))
                out.flush()
    finally:
        stopping.cancel()
    if not as_json and stats.recent:
        out.write("\n" + render_percentiles(list(stats.recent)))
        out.flush()
    return 0
