"""Validation of the ContextManager's constructor arguments (docs/context.md)."""

from __future__ import annotations

import pytest

from xrmq.actors.context import (
    DEFAULT_COMPACTION_INPUT_BUDGET_BYTES,
    DEFAULT_DIALOGUE_BUDGET_BYTES,
    DEFAULT_TOPIC_BUDGET_BYTES,
    context_config,
)
from xrmq.schemas import CompactionPrompts


def test_defaults_are_the_seeds_budgets():
    assert (
        DEFAULT_DIALOGUE_BUDGET_BYTES,
        DEFAULT_TOPIC_BUDGET_BYTES,
        DEFAULT_COMPACTION_INPUT_BUDGET_BYTES,
    ) == (
        8_000,
        4_000,
        12_000,
    )
    config = context_config(
        summary_context_topics=("sample.monitor-window",),
        incremental_context_topics=("sample.notes",),
    )
    assert config.dialogue.spec.budget_bytes == 8_000
    assert [s.spec.budget_bytes for s in config.topics] == [4_000, 4_000]
    assert config.dialogue.settings.input_budget_bytes == 12_000
    assert config.dialogue.settings.prompts == CompactionPrompts()


def test_sections_are_dialogue_then_summary_then_incremental_topics_in_configured_order():
    config = context_config(
        summary_context_topics=("s2", "s1"), incremental_context_topics=("i2", "i1")
    )
    assert [(s.spec.name, s.spec.kind) for s in config.sections] == [
        ("dialogue", "dialogue"),
        ("s2", "summary"),
        ("s1", "summary"),
        ("i2", "incremental"),
        ("i1", "incremental"),
    ]


def test_per_topic_budget_mapping_sets_each_topics_budget():
    config = context_config(
        summary_context_topics=("sample.monitor-window",),
        incremental_context_topics=("sample.notes",),
        topic_budget_bytes={"sample.monitor-window": 2_000, "sample.notes": 6_000},
    )
    assert {s.spec.name: s.spec.budget_bytes for s in config.topics} == {
        "sample.monitor-window": 2_000,
        "sample.notes": 6_000,
    }


@pytest.mark.parametrize(
    "parameter", ["dialogue_budget_bytes", "topic_budget_bytes", "compaction_input_budget_bytes"]
)
@pytest.mark.parametrize("value", [0, -1, True, 1.5, "100"])
def test_every_budget_must_be_a_positive_int(parameter, value):
    with pytest.raises(ValueError, match=f"^{parameter}: must be a positive int"):
        context_config(incremental_context_topics=("t",), **{parameter: value})


def test_each_mapped_topic_budget_must_be_a_positive_int():
    with pytest.raises(ValueError, match=r"^topic_budget_bytes\['t'\]: must be a positive int"):
        context_config(incremental_context_topics=("t",), topic_budget_bytes={"t": 0})


def test_topic_budget_mapping_must_cover_every_configured_topic():
    with pytest.raises(
        ValueError,
        match=r"^topic_budget_bytes: must have a value for every configured topic; missing \['b'\]",
    ):
        context_config(
            summary_context_topics=("a",),
            incremental_context_topics=("b",),
            topic_budget_bytes={"a": 100},
        )


def test_topic_budget_mapping_must_not_name_unconfigured_topics():
    with pytest.raises(
        ValueError, match=r"^topic_budget_bytes: names topics that are not configured: \['typo'\]"
    ):
        context_config(
            incremental_context_topics=("a",), topic_budget_bytes={"a": 100, "typo": 100}
        )


@pytest.mark.parametrize("parameter", ["summary_context_topics", "incremental_context_topics"])
def test_topic_list_must_be_a_sequence_of_names_not_a_string(parameter):
    with pytest.raises(ValueError, match=f"^{parameter}: must be a sequence of topic names"):
        context_config(**{parameter: "sample.notes"})


@pytest.mark.parametrize("parameter", ["summary_context_topics", "incremental_context_topics"])
@pytest.mark.parametrize("name", ["", None, 3])
def test_topic_names_must_be_non_empty_strings(parameter, name):
    with pytest.raises(ValueError, match=f"^{parameter}: topic names must be non-empty strings"):
        context_config(**{parameter: ("ok", name)})


@pytest.mark.parametrize("parameter", ["summary_context_topics", "incremental_context_topics"])
def test_topic_names_must_be_unique_within_a_list(parameter):
    with pytest.raises(
        ValueError, match=f"^{parameter}: topic names must be unique; 'x' appears more than once"
    ):
        context_config(**{parameter: ["x", "y", "x"]})


def test_topic_names_must_be_unique_across_both_lists():
    with pytest.raises(
        ValueError,
        match="^incremental_context_topics: topic names must be unique across both lists; 'x'",
    ):
        context_config(summary_context_topics=("x",), incremental_context_topics=("x",))


def test_compaction_input_budget_must_be_at_least_half_the_largest_section_budget_plus_256():
    topics = {"summary_context_topics": ("w",), "incremental_context_topics": ("n",)}
    budgets = {"w": 1_000, "n": 10_000}
    with pytest.raises(
        ValueError,
        match=r"^compaction_input_budget_bytes: must be at least half the largest section budget "
        r"plus 256 bytes \(>= 5256",
    ):
        context_config(
            **topics,
            topic_budget_bytes=budgets,
            dialogue_budget_bytes=2_000,
            compaction_input_budget_bytes=5_255,
        )
    config = context_config(
        **topics,
        topic_budget_bytes=budgets,
        dialogue_budget_bytes=2_000,
        compaction_input_budget_bytes=5_256,
    )
    assert config.dialogue.settings.input_budget_bytes == 5_256
    with pytest.raises(ValueError, match=r"\(>= 4256"):
        context_config(dialogue_budget_bytes=8_000, compaction_input_budget_bytes=4_255)


def test_compaction_input_budget_rule_rounds_half_an_odd_budget_up():
    with pytest.raises(ValueError, match="compaction_input_budget_bytes"):
        context_config(dialogue_budget_bytes=1_001, compaction_input_budget_bytes=756)
    context_config(dialogue_budget_bytes=1_001, compaction_input_budget_bytes=757)


def test_compaction_prompts_must_be_compaction_prompts():
    custom = CompactionPrompts(dialogue="Keep it short.")
    assert context_config(compaction_prompts=custom).dialogue.settings.prompts is custom
    with pytest.raises(
        ValueError, match="^compaction_prompts: must be a CompactionPrompts or None"
    ):
        context_config(compaction_prompts={"dialogue": "x"})


def test_topic_section_finds_a_configured_topic_in_its_mode():
    config = context_config(summary_context_topics=("w",), incremental_context_topics=("n",))
    assert config.topic_section("w", "summary").spec.kind == "summary"
    assert config.topic_section("n", "incremental").spec.kind == "incremental"


def test_topic_section_rejects_an_unknown_source():
    config = context_config(incremental_context_topics=("n",))
    with pytest.raises(ValueError, match="^source: 'm' is not a configured topic"):
        config.topic_section("m", "incremental")
    with pytest.raises(ValueError, match="^source: 'dialogue' is not a configured topic"):
        config.topic_section("dialogue", "incremental")


def test_topic_section_rejects_the_wrong_mode():
    config = context_config(summary_context_topics=("w",))
    with pytest.raises(
        ValueError, match="^mode: topic 'w' is configured as summary, not 'incremental'"
    ):
        config.topic_section("w", "incremental")


def test_a_topic_may_be_named_dialogue():
    config = context_config(incremental_context_topics=("dialogue",))
    assert config.topic_section("dialogue", "incremental").spec.kind == "incremental"
    assert config.dialogue.spec.kind == "dialogue"
