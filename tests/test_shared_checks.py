"""The small checks every component shares (``schemas/_validation.py``, ``topics.check_topic``)
and the one list of runtime counter names (``schemas/metrics.RuntimeCounters``)."""

from __future__ import annotations

import msgspec
import pytest

from xrmq.actors.edge.top import RuntimeRow
from xrmq.actors.runtime import AgentRuntime
from xrmq.schemas import ResponseOutput, RuntimeMetrics, UserQuery
from xrmq.schemas._validation import check_name, check_positive, is_name
from xrmq.schemas.metrics import RUNTIME_COUNTERS, RuntimeCounters, counters_of
from xrmq.topics import SEP, VOICE_OUTPUT_TOPIC, check_topic, topic_key


@pytest.mark.parametrize("value", ["", "a\x00b", None, 3, b"name"])
def test_a_name_must_be_a_non_empty_string_without_nul(value: object) -> None:
    assert not is_name(value)
    with pytest.raises(
        ValueError, match="^participant_id: must be a non-empty string without NUL$"
    ):
        check_name(value, "participant_id")


def test_only_whitespace_is_a_name_unless_blank_names_are_refused() -> None:
    assert is_name("  ") and not is_name("  ", blank=False)
    assert check_name("p1", "participant_id") == "p1"


@pytest.mark.parametrize("value", [0, -1, True, 1.5, "2"])
def test_a_capacity_must_be_an_int_of_at_least_one(value: object) -> None:
    with pytest.raises(ValueError, match="^SequenceTracker.capacity: must be an int >= 1$"):
        check_positive(value, "SequenceTracker.capacity")


def test_the_runtime_refuses_a_capacity_below_one_naming_it() -> None:
    with pytest.raises(ValueError, match="^mailbox_capacity: must be an int >= 1$"):
        AgentRuntime(mailbox_capacity=0)
    with pytest.raises(ValueError, match="^outgoing_streams: must be an int >= 1$"):
        AgentRuntime(outgoing_streams=0)


def test_a_component_topic_must_carry_its_type() -> None:
    check_topic(None, ResponseOutput, "VoiceRenderer.output_topic")
    check_topic(VOICE_OUTPUT_TOPIC, ResponseOutput, "VoiceRenderer.output_topic")
    with pytest.raises(
        ValueError, match="^VoiceRenderer.query_topic: must be a Topic carrying UserQuery$"
    ):
        check_topic(VOICE_OUTPUT_TOPIC, UserQuery, "VoiceRenderer.query_topic")


def test_sep_ends_each_field_of_a_wire_key() -> None:
    assert topic_key("notes", "p1") == b"notes" + SEP + b"p1" + SEP


def test_every_runtime_counter_is_an_int_field_of_runtime_metrics_and_of_top_rows() -> None:
    metrics_fields = {field.name: field.type for field in msgspec.structs.fields(RuntimeMetrics)}
    assert all(metrics_fields[name] is int for name in RUNTIME_COUNTERS)
    assert issubclass(RuntimeRow, RuntimeCounters)
    runtime = AgentRuntime()
    assert set(counters_of(runtime.metrics())) == set(RUNTIME_COUNTERS)
