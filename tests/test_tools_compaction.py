"""docs/tools.md's automatic compaction as a ``ToolAgent`` runs it: the trigger is the
response's ``total_tokens`` (estimated by the tokenizer when the provider reports none),
checked before each step of a turn, so one long tool loop is summarized inside the turn;
a custom ``CompactorAbstract`` is called; a disabled compactor never compacts; the box
config's ``auto_compact`` and ``compactor`` build them."""

from __future__ import annotations

import itertools
import json
from pathlib import Path
from typing import Any

import pytest
from tools_doubles import (
    Probe,
    RecordingCompactor,
    never_started,
    probe_reading,
    request_tokens,
    turn,
)

from xrmq.actors.context import context_plan, register_workers
from xrmq.actors.edge.config import ConfigError, EdgeConfig
from xrmq.actors.edge.config_loader import load_config
from xrmq.actors.edge.roles import check_roles
from xrmq.actors.edge.stack import build_compactor
from xrmq.actors.models import (
    ChatMessage,
    ChatRequest,
    OfflineLLM,
    ScriptedLLM,
    ScriptedResponse,
    ToolCall,
    Usage,
)
from xrmq.actors.models.openai_messages import message_dict
from xrmq.actors.runtime import AgentRuntime
from xrmq.actors.tools.policy import (
    AutoCompactor,
    AutoCompactReport,
    Compacting,
    CompactorAbstract,
    count_message_tokens,
)
from xrmq.actors.tools.summary import (
    COMPACTED_NOTE,
    SUMMARY_LIMIT_TOKENS,
    compacted_system_message,
    count_text_tokens,
    llm_summarizer,
)
from xrmq.actors.tools.tool import Tool
from xrmq.actors.tools.tool_agent import ToolAgent
from xrmq.actors.tools.workers import WorkerSummarizer
from xrmq.topics import VOICE_OUTPUT_TOPIC

from router_doubles import FakeContext

SURVEY = "Survey every probe of the rig."
CALLS = 50


def surveyor(*, report_usage: bool = True) -> ScriptedLLM:
    """Calls the probe ``CALLS`` times in one turn, one call per step, then answers;
    writes a short summary when asked for one."""
    made = [0]

    def respond(request: ChatRequest) -> ScriptedResponse:
        usage = Usage(total_tokens=request_tokens(request)) if report_usage else Usage()
        if "Summarize the earlier part" in request.messages[0].content:
            return ScriptedResponse("## overview\nProbes were surveyed in order.", usage=usage)
        if made[0] < CALLS:
            made[0] += 1
            call = ToolCall(f"s{made[0]}", "probe", json.dumps({"index": made[0]}))
            return ScriptedResponse(usage=usage, tool_calls=(call,))
        return ScriptedResponse(f"All {CALLS} probes are steady.", usage=usage)

    return ScriptedLLM(default=respond)


def agent_with(llm: ScriptedLLM, runtime: AgentRuntime, **kwargs: object) -> ToolAgent:
    return ToolAgent(
        llm,
        context=FakeContext(),
        runtime=runtime,
        output_topic=VOICE_OUTPUT_TOPIC,
        tools=[Tool("probe", "Read a probe.", Probe, probe_reading)],
        max_iterations=CALLS + 5,
        **kwargs,  # type: ignore[arg-type]
    )


def is_answer_step(request: ChatRequest) -> bool:
    return "Summarize the earlier part" not in request.messages[0].content


async def test_one_long_tool_loop_is_summarized_within_the_turn_and_its_requests_stay_bounded() -> (
    None
):
    threshold = 4_000
    llm = surveyor()
    async with AgentRuntime() as runtime:
        agent = agent_with(llm, runtime, compactor=AutoCompactor(token_threshold=threshold))
        result = await agent.answer(turn("t1", SURVEY), started=never_started)
        transcript = agent.transcript("p1")
    steps = [request for request in llm.requests if is_answer_step(request)]
    assert result.response == f"All {CALLS} probes are steady." and len(steps) == CALLS + 1
    # Unbounded, the last request would hold every result.
    results = sum(len(probe_reading(Probe(index))) for index in range(1, CALLS + 1)) // 4
    assert results > 5 * threshold
    sizes = [request_tokens(request) for request in steps]
    growth = max(b - a for a, b in itertools.pairwise(sizes))
    assert max(sizes) <= threshold + growth  # checked before each step: at most one step over
    assert transcript.counters.summary_rounds >= 1 and transcript.summary is not None
    # After a summary the system message is "summary + compaction note" (seed 002).
    system = steps[-1].messages[0].content
    assert system.endswith(f"\n\n{COMPACTED_NOTE}") and system.startswith("## system_context")
    for request in steps:
        body = request.messages[2:]  # after the system message and the shared context
        assert body[0].role == "user" and body[0].content == SURVEY
        offered = {call.id for message in body for call in message.tool_calls}
        assert all(m.tool_call_id in offered for m in body if m.role == "tool")


async def test_a_provider_without_usage_is_estimated_by_the_tokenizer_and_compacted_on_it() -> None:
    llm = surveyor(report_usage=False)
    seen: list[tuple[int | None, bool]] = []

    class Watching(AutoCompactor):
        async def auto_compact(self, agent: Compacting) -> AutoCompactReport | None:
            seen.append((agent.conversation.total_tokens, agent.conversation.tokens_estimated))
            return await super().auto_compact(agent)

    async with AgentRuntime() as runtime:
        agent = agent_with(llm, runtime, compactor=Watching(token_threshold=3_000))
        await agent.answer(turn("t1", SURVEY), started=never_started)
        transcript = agent.transcript("p1")
    assert seen[0] == (None, False)  # nothing was reported before the first step
    expected = count_message_tokens(llm.model, llm.requests[0].messages, "")
    assert seen[1] == (expected, True)
    assert transcript.counters.toolcall_reclaimed > 0 and transcript.counters.summary_rounds > 0


async def test_a_custom_compactor_is_called_before_every_step() -> None:
    compactor, llm = RecordingCompactor(), surveyor()
    async with AgentRuntime() as runtime:
        agent = agent_with(llm, runtime, compactor=compactor)
        await agent.answer(turn("t1", SURVEY), started=never_started)
    # One user message, then each step adds a call and its result.
    assert compactor.calls == [("p1", 1 + 2 * step) for step in range(CALLS + 1)]


def box(tmp_path: Path, table: str) -> EdgeConfig:
    path = tmp_path / "edge.toml"
    path.write_text(f'[destinations.t]\ndescription = "Tools."\nkind = "tools"\n{table}\n')
    return load_config(path)


def test_the_box_config_builds_the_compactor_it_names(tmp_path: Path) -> None:
    default = build_compactor(box(tmp_path, ""), "t")
    assert isinstance(default, AutoCompactor) and default.enabled
    assert default.token_threshold == 192_000
    tuned = build_compactor(box(tmp_path, "auto_compact = { token_threshold = 5000 }"), "t")
    assert isinstance(tuned, AutoCompactor) and tuned.token_threshold == 5000
    off = build_compactor(box(tmp_path, "auto_compact = { enabled = false }"), "t")
    assert isinstance(off, AutoCompactor) and not off.enabled
    custom = box(tmp_path, 'compactor = "tools_doubles:RecordingCompactor"')
    check_roles(custom)  # what `xrmq up --check` resolves
    assert type(build_compactor(custom, "t")) is RecordingCompactor
    custom_off = box(
        tmp_path,
        'compactor = "tools_doubles:RecordingCompactor"\nauto_compact = { enabled = false }',
    )
    assert not build_compactor(custom_off, "t").enabled
    wrong = box(tmp_path, 'compactor = "tools_doubles:Probe"')
    with pytest.raises(ConfigError, match=r"destinations\.t\.compactor: .* is not a Compactor"):
        check_roles(wrong)


async def test_a_disabled_compactor_never_compacts() -> None:
    class Disabled(CompactorAbstract):
        enabled = False

        async def auto_compact(self, agent: Compacting) -> None:
            raise AssertionError("a disabled compactor is never called")

    llm = surveyor()
    async with AgentRuntime() as runtime:
        off = agent_with(llm, runtime, compactor=AutoCompactor(token_threshold=10, enabled=False))
        await off.answer(turn("t1", SURVEY), started=never_started)
        custom = agent_with(surveyor(), runtime, compactor=Disabled())
        await custom.answer(turn("t1", SURVEY), started=never_started)
    for agent in (off, custom):
        counters = agent.transcript("p1").counters
        assert (counters.toolcall_rounds_total, counters.summary_rounds) == (0, 0)
        assert len(agent.transcript("p1").messages) == 2 + 2 * CALLS
    assert all(is_answer_step(request) for request in llm.requests)


# ---------------------------------------------------------------- the summary


def dialogue() -> tuple[Any, ...]:
    """A short tool-using dialogue as the transcript holds it (OpenAI's typed messages)."""
    return tuple(
        message_dict(message)
        for message in (
            ChatMessage("user", "I prefer metric units. Please check the pressure of tank 4."),
            ChatMessage(
                "assistant", "", tool_calls=(ToolCall("r1", "gauge", json.dumps({"tank": 4})),)
            ),
            ChatMessage(
                "tool", "Tank 4 pressure is 41.7 kPa. Valve V-12 is open.", tool_call_id="r1"
            ),
            ChatMessage("assistant", "Tank 4 reads 41.7 kPa. I will close valve V-12 next."),
            ChatMessage("user", "Thanks, quickly please. Is tank 5 also safe?"),
        )
    )


async def test_the_offline_model_writes_the_summary_in_the_seeds_sections() -> None:
    summarize = llm_summarizer(OfflineLLM(time_to_first_token_s=0, tokens_per_second=0))
    summary = await summarize(dialogue(), None)
    assert summary is not None
    headers = [line[3:] for line in summary.splitlines() if line.startswith("## ")]
    assert headers == [
        "system_context",
        "overview",
        "key_facts",
        "user_preferences",
        "decisions",
        "pending_tasks",
        "open_questions",
        "tone_context",
    ]
    section = dict(part.split("\n", 1) for part in summary.split("\n\n"))
    assert "gauge (r1)" in section["## system_context"]
    assert "r1: Tank 4 pressure is 41.7 kPa." in section["## key_facts"]
    assert section["## user_preferences"] == "I prefer metric units."
    assert "close valve V-12" in section["## decisions"]
    assert section["## pending_tasks"] == "Please check the pressure of tank 4."
    assert section["## open_questions"] == "Is tank 5 also safe?"
    assert "quickly please" in section["## tone_context"]
    assert count_text_tokens(summary) <= SUMMARY_LIMIT_TOKENS
    # A second summary merges the first one in, section by section.
    later = ({"role": "user", "content": "My badge number is 4471."},)
    merged = await summarize(later, summary)
    assert merged is not None
    facts = dict(part.split("\n", 1) for part in merged.split("\n\n"))["## key_facts"]
    assert "r1: Tank 4 pressure is 41.7 kPa." in facts and "My badge number is 4471." in facts


class Wordy:
    """A model whose summaries run long: ``condensed`` answers the condense request."""

    def __init__(self, condensed: str) -> None:
        self.condensed = condensed
        self.prompts: list[str] = []

    def __call__(self, request: ChatRequest) -> ScriptedResponse:
        self.prompts.append(request.messages[0].content)
        if request.messages[0].content.startswith("Condense"):
            return ScriptedResponse(self.condensed)
        return ScriptedResponse("## key_facts\n" + "Probe 7 reads 41.7 kPa. " * 400)


async def test_a_summary_over_1024_tokens_is_condensed_and_always_ends_within_them() -> None:
    short = "## key_facts\nProbe 7 reads 41.7 kPa."
    wordy = Wordy(short)
    summary = await llm_summarizer(ScriptedLLM(default=wordy))(dialogue(), None)
    assert summary == short and len(wordy.prompts) == 2
    assert "Use markdown sections: system_context, overview" in wordy.prompts[1]
    stubborn = Wordy("## key_facts\n" + "Probe 7 still reads 41.7 kPa. " * 400)
    cut = await llm_summarizer(ScriptedLLM(default=stubborn))(dialogue(), None)
    assert cut is not None and cut.startswith("## key_facts\nProbe 7 still reads")
    assert SUMMARY_LIMIT_TOKENS - 20 < count_text_tokens(cut) <= SUMMARY_LIMIT_TOKENS


async def test_the_compaction_workers_condense_a_summary_over_1024_tokens() -> None:
    plan = context_plan(compaction_workers=2)
    runtime = AgentRuntime()
    wordy = Wordy("## key_facts\nProbe 7 reads 41.7 kPa.")
    register_workers(runtime, plan, ScriptedLLM(default=wordy))
    summarizer = runtime.register("tools-summarizer", WorkerSummarizer(plan, timeout_s=10))
    async with runtime:
        summary = await summarizer(dialogue(), None)
    assert summary == "## key_facts\nProbe 7 reads 41.7 kPa." and summarizer.failed == 0
    assert [prompt.split(" ", 1)[0] for prompt in wordy.prompts] == ["Summarize", "Condense"]


def test_a_summary_replaces_the_system_message_with_summary_and_compaction_note() -> None:
    """Seed 002: "On success the system message is replaced with 'summary + compaction
    note'"; the summary's system_context is the agent's own prompt, verbatim."""
    written = "## system_context\nAn assistant.\n\n## key_facts\n- probe 7 reads 3.3 V"
    message = compacted_system_message(written, "You read probes. Quote volts exactly.")
    assert message == (
        "## system_context\nYou read probes. Quote volts exactly.\n\n"
        f"## key_facts\n- probe 7 reads 3.3 V\n\n{COMPACTED_NOTE}"
    )
    without = compacted_system_message("## key_facts\n- door 4417", "Be brief.")
    assert (
        without == f"## system_context\nBe brief.\n\n## key_facts\n- door 4417\n\n{COMPACTED_NOTE}"
    )
    last = compacted_system_message("## overview\nx\n## system_context\nold prompt", "New.")
    assert last == f"## overview\nx\n## system_context\nNew.\n\n{COMPACTED_NOTE}"
    assert compacted_system_message("## overview\nx", "") == f"## overview\nx\n\n{COMPACTED_NOTE}"
