"""The compactions a turn caused, in its record and its trace.

A tools destination whose transcript outgrows its limit in one long tool loop compacts it
before a model call (``AutoCompactor``): each compaction that ran is in the answer's
``DestinationStages.compactions`` (kind, outcome, steps, times on the destination's
clock), the router's ``TurnRecord`` carries them, and the OTLP export makes each one a
span of the turn's trace, a child of its root, under the destination's process. A turn
that compacted nothing lists none.
"""

from __future__ import annotations

import pytest
from otlp_receiver import OTLPReceiver
from test_tools_compaction import CALLS, SURVEY, agent_with, surveyor
from tools_doubles import never_started, turn

from xrmq.actors.edge.telemetry import turn_spans
from xrmq.actors.routing.policy import RouteResult
from xrmq.actors.routing.turn_report import TurnTimes, turn_record
from xrmq.actors.runtime import AgentRuntime
from xrmq.actors.tools.policy import AutoCompactor, AutoCompactReport, Compacting
from xrmq.schemas import AgentTurn, CompactionTime, DestinationStages, TurnRecord

pytestmark = pytest.mark.timeout(60)


class Counting(AutoCompactor):
    """An ``AutoCompactor`` that keeps the report of every compaction it ran (``ran``)."""

    def __post_init__(self) -> None:
        super().__post_init__()
        self.ran: list[AutoCompactReport] = []

    async def auto_compact(self, agent: Compacting) -> AutoCompactReport | None:
        report = await super().auto_compact(agent)
        if report is not None:
            self.ran.append(report)
        return report


async def test_each_auto_compaction_within_a_turn_is_in_its_stages_in_order():
    compactor = Counting(token_threshold=4_000)
    async with AgentRuntime() as runtime:
        agent = agent_with(surveyor(), runtime, compactor=compactor)
        result = await agent.answer(turn("t1", SURVEY), started=never_started)
    assert result.response == f"All {CALLS} probes are steady."
    stages = result.stages
    assert stages is not None and compactor.ran
    compactions = stages.compactions
    assert [(c.kind, c.outcome, c.steps, c.still_over) for c in compactions] == [
        ("tools", r.outcome.value, len(r.steps), r.still_over) for r in compactor.ran
    ]
    assert "compacted" in {c.outcome for c in compactions}
    assert stages.model_request_us is not None
    ends = [stages.model_request_us]
    for compaction in compactions:
        assert ends[-1] <= compaction.started_us <= compaction.ended_us
        ends.append(compaction.ended_us)


async def test_a_turn_that_compacted_nothing_lists_no_compaction():
    async with AgentRuntime() as runtime:
        agent = agent_with(surveyor(), runtime, compactor=AutoCompactor(enabled=False))
        result = await agent.answer(turn("t1", SURVEY), started=never_started)
    assert result.stages is not None and result.stages.compactions == ()


def compacted_record() -> TurnRecord:
    compactions = (
        CompactionTime("tools", "compacted", 300, 340, steps=2),
        CompactionTime("tools", "nothing_to_condense", 500, 510, steps=1, still_over=True),
    )
    times = TurnTimes(110, query_us=100, query_crossed=True, routed_us=120, client="front")
    times.stages = DestinationStages(
        "tools-process", "offline", model_request_us=200, compactions=compactions
    )
    return turn_record(
        AgentTurn("p1", "t1", "Survey every probe."),
        RouteResult("t1", "answered", route="tools"),
        times,
        "router",
    )


def test_the_record_carries_the_destination_s_compactions_and_each_is_a_span_of_the_turn():
    record = compacted_record()
    assert [c.outcome for c in record.compactions] == ["compacted", "nothing_to_condense"]
    spans = turn_spans(record)
    compactions = [s for s in spans if s.name == "xrmq.compaction tools"]
    assert [(s.start_us, s.end_us, s.parent, s.runtime) for s in compactions] == [
        (300, 340, 0, "tools-process"),
        (500, 510, 0, "tools-process"),
    ]
    assert compactions[1].attributes == {
        "xrmq.compaction.kind": "tools",
        "xrmq.compaction.outcome": "nothing_to_condense",
        "xrmq.compaction.steps": 1,
        "xrmq.compaction.still_over": True,
    }


async def test_the_otlp_export_sends_each_compaction_as_a_span_under_the_turn_s_root():
    from xrmq.actors.edge.otlp import TraceExporter

    with OTLPReceiver() as receiver:
        exporter = TraceExporter(f"{receiver.endpoint}/v1/traces")
        exporter.observe(compacted_record())
        await exporter.on_stop()
        await receiver.until(lambda spans: len(spans) >= 5)
    [root] = [s for s in receiver.spans if s.name == "xrmq.turn"]
    compactions = [s for s in receiver.spans if s.name == "xrmq.compaction tools"]
    assert len(compactions) == 2
    for span in compactions:
        assert (span.trace_id, span.parent_span_id) == (root.trace_id, root.span_id)
        assert span.resource["service.instance.id"] == "tools-process"
    assert sorted(s.attributes["xrmq.compaction.outcome"] for s in compactions) == [
        "compacted",
        "nothing_to_condense",
    ]
