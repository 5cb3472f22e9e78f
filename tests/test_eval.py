"""The compaction-quality eval's mechanics, on the offline model (issue 21).

The figures themselves come from real models; these tests pin what makes them
trustworthy: reproducible sessions, enough compactions, probes only for summarized
facts, exact replay, and a scorer that sees what a lossy compactor lost.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import re
import subprocess
import sys
from collections.abc import AsyncGenerator
from pathlib import Path

import msgspec
import pytest

from xrmq.actors.context.salience import extractive_summary
from xrmq.actors.eval import eval_cli as cli
from xrmq.actors.eval.eval_session import QUICK_CONFIG, Fact, Session, Statement, generate_session
from xrmq.actors.eval.report import figures
from xrmq.actors.eval.report import table as report_table
from xrmq.actors.eval.runner import RunResult, run_variant
from xrmq.actors.eval.scoring import mentions, score, states_as_current
from xrmq.actors.models import LLMService, OfflineLLM, compaction_limit
from xrmq.actors.models.types import ChatRequest, ChatResult
from xrmq.schemas import CompactionPrompts

ROOT = Path(__file__).resolve().parents[1]
OFFLINE = OfflineLLM(time_to_first_token_s=0, tokens_per_second=0)


def _run(session: Session, compactor: LLMService = OFFLINE, *, guarded: bool = True) -> RunResult:
    return asyncio.run(
        run_variant(
            session,
            "default",
            CompactionPrompts(),
            compaction_llm=compactor,
            answers_llm=OFFLINE,
            guarded=guarded,
        )
    )


@pytest.fixture(scope="module")
def quick_session() -> Session:
    return generate_session(7, QUICK_CONFIG)


@pytest.fixture(scope="module")
def quick_run(quick_session: Session) -> RunResult:
    return _run(quick_session)


# --- sessions ---------------------------------------------------------------------


def test_one_seed_gives_the_same_session_byte_for_byte() -> None:
    first = msgspec.json.encode(generate_session(11, QUICK_CONFIG))
    assert first == msgspec.json.encode(generate_session(11, QUICK_CONFIG))
    assert first != msgspec.json.encode(generate_session(12, QUICK_CONFIG))


def test_a_session_plants_every_fact_kind_with_distinct_values(quick_session: Session) -> None:
    kinds = {fact.kind for fact in quick_session.facts}
    assert kinds == {
        "number",
        "name",
        "time",
        "identifier",
        "correction",
        "sensor",
        "cross_section",
    }
    for fact in quick_session.facts:
        if fact.kind in ("correction", "cross_section", "sensor"):
            assert fact.superseded, f"{fact.fact_id} has nothing superseded"
    values = [
        s.value
        for fact in quick_session.facts
        if fact.participant_id == "p1"
        for s in fact.statements
    ]
    assert len(values) == len(set(values))


def test_a_session_has_oversized_exchanges_and_updates_larger_than_a_compaction_request(
    quick_session: Session,
) -> None:
    budget = QUICK_CONFIG.compaction_input_budget_bytes
    sizes = [len((e.request or e.text).encode()) for e in quick_session.events["p1"]]
    assert max(sizes) > budget


# --- the run ----------------------------------------------------------------------


def test_every_compacted_section_compacts_at_least_ten_times_in_the_quick_session(
    quick_run: RunResult,
) -> None:
    compacted = [s for s in quick_run.sections if s.section in ("dialogue", "notes")]
    assert len(compacted) == 2 * QUICK_CONFIG.participants
    assert all(s.compactions >= 10 for s in compacted), [
        (s.participant_id, s.section, s.compactions) for s in compacted
    ]
    assert all(size <= s.limit_bytes for s in compacted for size in s.summary_bytes)


def _verbatim(run: RunResult, pid: str, text: str, checkpoint: int = -1) -> bool:
    """``text`` stands in one of the participant's dated (uncompacted) blocks."""
    blocks = run.contexts[pid][checkpoint]
    return any(block.timestamp_us is not None and text in block.text for block in blocks)


def _statement_text(session: Session, fact: Fact, statement: Statement) -> str:
    event = session.events[fact.participant_id][statement.event_index]
    return (event.request or event.text).splitlines()[0]


SHORT_CONFIG = msgspec.structs.replace(QUICK_CONFIG, participants=1, exchanges=45)
"""So short that some facts are still verbatim at the end: they must not be probed."""


@pytest.mark.parametrize("config", [QUICK_CONFIG, SHORT_CONFIG], ids=["quick", "short"])
def test_probes_target_only_facts_that_live_solely_in_a_summary(config) -> None:
    session = generate_session(7, config)
    run = _run(session)
    last = config.probe_points - 1
    probed_at_end = {p.fact_id for p in run.probes if p.checkpoint == last}
    assert probed_at_end and len(probed_at_end) + len(run.skipped_facts) == len(session.facts)
    assert {p.checkpoint for p in run.probes} == set(range(config.probe_points))
    if config is SHORT_CONFIG:
        assert run.skipped_facts, "the short session should leave some facts verbatim"
    facts = {fact.fact_id: fact for fact in session.facts}

    def verbatim(fact: Fact, checkpoint: int) -> list[bool]:
        statements = fact.statements[:1] if fact.kind == "cross_section" else fact.statements
        return [
            _verbatim(run, fact.participant_id, _statement_text(session, fact, s), checkpoint)
            for s in statements
        ]

    for probe in run.probes:
        assert not any(verbatim(facts[probe.fact_id], probe.checkpoint)), (
            f"{probe.fact_id} was probed at point {probe.checkpoint} while still verbatim"
        )
    for fact_id in run.skipped_facts:
        assert any(verbatim(facts[fact_id], last)), (
            f"{fact_id} was skipped though only in a summary"
        )
    assert all(p.depth >= 1 for p in run.probes)


def test_a_replay_of_a_runs_log_reproduces_its_scores_exactly(tmp_path: Path) -> None:
    parser = argparse.ArgumentParser()
    cli.add_arguments(parser)
    assert cli.run(parser.parse_args(["--quick", "--out", str(tmp_path / "run")])) == 0
    log = tmp_path / "run" / "calls.jsonl"
    assert (
        cli.run(parser.parse_args(["--replay", str(log), "--out", str(tmp_path / "replay")])) == 0
    )
    original = json.loads((tmp_path / "run" / "results.json").read_text())
    replayed = json.loads((tmp_path / "replay" / "results.json").read_text())
    assert replayed["figures"] == original["figures"]
    assert replayed["runs"] == original["runs"]
    assert original["seed"] == 7 and original["versions"]["msgspec"]
    assert original["models"]["compaction"]["model"] == "offline"
    lines = log.read_text().splitlines()
    first = json.loads(lines[0])
    assert first["type"] == "run" and set(first["prompts"]) == {"default"}
    call = json.loads(lines[1])
    assert {"messages", "options", "text", "finish_reason", "usage", "latency_s"} <= set(call)
    assert replayed["latency"] == original["latency"]  # the logged model's, not the replay's
    assert set(original["latency"]) >= {"answer", "compact.dialogue", "compact.notes"}


class _NumberDroppingCompactor(LLMService):
    """Keeps every planted statement it is given except those holding a digit.

    It answers only compaction requests (they state a limit); it knows the planted
    sentences from the session, so everything without a number survives every rewrite.
    """

    def __init__(self, session: Session) -> None:
        super().__init__("number-dropper")
        self.keep = {
            _statement_text(session, fact, s) for fact in session.facts for s in fact.statements
        }

    async def _generate(self, request: ChatRequest) -> AsyncGenerator[str | ChatResult, None]:
        assert compaction_limit(request.messages[0].content) is not None
        material = "\n".join(m.content for m in request.messages[1:])
        kept = [s for s in sorted(self.keep) if s in material and not re.search(r"\d", s)]
        yield "\n".join(kept) or "Nothing to keep."
        yield ChatResult("stop")


def test_a_compactor_that_drops_every_number_scores_zero_on_numbers_and_full_marks_on_names(
    quick_session: Session,
) -> None:
    # The scorer is the subject: the guards, which would keep the numbers, are off.
    result = figures(_run(quick_session, _NumberDroppingCompactor(quick_session), guarded=False))
    assert result.by_kind["number"].answer_recall == 0.0
    assert result.by_kind["number"].context_recall == 0.0
    assert result.by_kind["name"].probes > 0
    assert result.by_kind["name"].context_recall == 1.0
    assert result.by_kind["name"].answer_recall == 1.0


class _FrozenCompactor(LLMService):
    """Returns the previous summary unchanged (the extractive summary when there is none)."""

    def __init__(self) -> None:
        super().__init__("frozen")

    async def _generate(self, request: ChatRequest) -> AsyncGenerator[str | ChatResult, None]:
        limit = compaction_limit(request.messages[0].content)
        assert limit is not None
        material = request.messages[1].content
        previous = re.search(r"<previous_summary>\n(.*)\n</previous_summary>", material, re.S)
        yield previous.group(1) if previous else extractive_summary(material, limit)
        yield ChatResult("stop")


def test_the_report_counts_what_the_guards_refused_and_what_an_unguarded_run_accepted() -> None:
    session = generate_session(7, SHORT_CONFIG)

    def run(guarded: bool) -> RunResult:
        return asyncio.run(
            run_variant(
                session,
                "default",
                CompactionPrompts(),
                compaction_llm=_FrozenCompactor(),
                answers_llm=OFFLINE,
                guarded=guarded,
            )
        )

    guarded, unguarded = figures(run(True)), figures(run(False))
    assert guarded.guards.frozen > 0 and guarded.guards.fallbacks > 0
    assert guarded.guards.frozen_accepted == guarded.guards.lossy_accepted == 0
    assert unguarded.guards.frozen_accepted > 0
    assert unguarded.guards.frozen == unguarded.guards.fallbacks == 0
    assert guarded.context_recall > unguarded.context_recall
    calls = guarded.calls
    assert calls["answer"] == guarded.probes
    assert calls["compact.dialogue"] > 0 and calls["compact.notes"] > 0
    table = report_table([guarded])
    assert "frozen / lossy refused" in table and "compact.dialogue" in table


def test_size_flags_shrink_the_session_for_a_slow_model() -> None:
    parser = argparse.ArgumentParser()
    cli.add_arguments(parser)
    args = ["--participants", "1", "--exchanges", "40", "--facts-per-kind", "1"]
    config = cli._session_config(parser.parse_args(args))
    assert (config.participants, config.exchanges, config.facts_per_kind) == (1, 40, 1)
    quick = cli._session_config(parser.parse_args(["--quick", "--exchanges", "30"]))
    assert (quick.participants, quick.exchanges) == (QUICK_CONFIG.participants, 30)
    assert parser.parse_args([]).guards and not parser.parse_args(["--no-guards"]).guards
    with pytest.raises(ValueError, match="--facts-per-kind: must be a positive integer"):
        cli._session_config(parser.parse_args(["--facts-per-kind", "0"]))


def test_only_runs_the_named_prompts_variants(tmp_path: Path) -> None:
    prompts = tmp_path / "prompts.toml"
    prompts.write_text('[terse]\ndialogue = "Summarize briefly."\n')
    parser = argparse.ArgumentParser()
    cli.add_arguments(parser)
    size = ["--participants", "1", "--exchanges", "30", "--facts-per-kind", "1"]
    common = [*size, "--prompts", str(prompts), "--out", str(tmp_path / "run")]
    assert cli.run(parser.parse_args([*common, "--only", "terse"])) == 0
    results = json.loads((tmp_path / "run" / "results.json").read_text())
    assert [f["variant"] for f in results["figures"]] == ["terse"]
    assert list(results["prompts"]) == ["terse"]
    with pytest.raises(ValueError, match="--only: no prompts variant missing"):
        cli.run(parser.parse_args([*common, "--only", "missing"]))


def test_the_offline_model_answers_a_time_the_context_kept_never_the_clock(
    quick_run: RunResult,
) -> None:
    """A question like "What time is my yoga class?" is answered from the summary, never
    with the clock line (it was: 0 % of times answered while 71 % were kept)."""
    time = figures(quick_run).by_kind["time"]
    assert time.probes > 0 and time.context_recall > 0
    assert time.answer_recall == time.context_recall


def test_python_m_bench_eval_quick_runs_and_writes_its_report(tmp_path: Path) -> None:
    done = subprocess.run(
        [sys.executable, "-m", "bench", "eval", "--quick", "--out", str(tmp_path)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    assert "| number |" in done.stdout
    assert (tmp_path / "results.json").exists() and (tmp_path / "calls.jsonl").exists()


# --- the scorer -------------------------------------------------------------------


def _fact(*values: str) -> Fact:
    return Fact(
        "p1.x.0",
        "p1",
        "correction",
        "Which room?",
        tuple(Statement(i, v) for i, v in enumerate(values)),
    )


def test_a_value_counts_only_as_a_whole_token() -> None:
    assert mentions("Your badge number is 4471.", "4471")
    assert not mentions("Room 44710 is free.", "4471")
    assert not mentions("Ticket AB-4471-K3 is open.", "4471")
    assert not mentions("It is 12:45 now.", "12")
    assert mentions("The forklift is in Bay 12.", "bay 12")
    assert mentions("It reads -18.5 C.", "-18.5")
    assert not mentions("It reads -18.55 C.", "-18.5")


def test_a_superseded_value_stated_as_current_counts_against() -> None:
    fact = _fact("807", "529")
    assert score("The meeting is in room 529.", fact).correct
    stale = score("The meeting is in room 807.", fact)
    assert stale.stale and not stale.correct
    both = score("It is in room 807. It is in room 529.", fact)
    assert both.recalled and both.stale and not both.correct


def test_a_superseded_value_marked_as_such_does_not_count_against() -> None:
    fact = _fact("807", "529")
    assert score("The meeting moved from room 807 to room 529.", fact).correct
    assert score("It is in room 529 (previously 807).", fact).correct
    assert not states_as_current("It was previously in room 807.", "807")


# --- options ----------------------------------------------------------------------


def test_prompt_variants_come_from_a_toml_file_and_errors_name_the_file_and_variant(
    tmp_path: Path,
) -> None:
    good = tmp_path / "prompts.toml"
    good.write_text('[terse]\ndialogue = "Summarize briefly."\n')
    variants = cli.load_prompt_variants(good)
    assert list(variants) == ["default", "terse"]
    assert variants["terse"].dialogue == "Summarize briefly."
    assert variants["terse"].source == CompactionPrompts().source
    bad = tmp_path / "bad.toml"
    bad.write_text('[blank]\ndialogue = "  "\n')
    with pytest.raises(ValueError, match=r"bad\.toml: \[blank\]: .*dialogue"):
        cli.load_prompt_variants(bad)


def test_model_takes_the_config_forms_and_the_offline_model_runs_unpaced() -> None:
    assert cli.model_spec("offline", None, None).time_to_first_token_s == 0
    assert cli.model_spec("hosted", None, None).model == "openai/gpt-5-mini"
    spec = cli.model_spec("hosted_vllm/Qwen/Qwen3-4B", "http://127.0.0.1:9/v1", None)
    assert (spec.model, spec.api_base) == ("hosted_vllm/Qwen/Qwen3-4B", "http://127.0.0.1:9/v1")
    table = cli.model_spec('{"preset": "local", "timeout_s": 5}', None, None)
    assert (table.model, table.timeout_s) == ("hosted_vllm/Qwen/Qwen3-4B", 5)
    with pytest.raises(ValueError, match="ModelSpec.timeout_s"):
        cli.model_spec('{"model": "x", "timeout_s": -1}', None, None)
