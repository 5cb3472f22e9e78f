"""One context configuration type (``ContextOptions``) with its bounds as ``msgspec.Meta``,
and config errors explained from a type's structure (``xrmq.actors.explain``), never by
parsing msgspec's messages."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import msgspec
import pytest

from xrmq.actors.context import (
    ContextManager,
    ContextOptions,
    config_of,
    context_config,
    context_options,
    plan_of,
)
from xrmq.actors.context.config import ContextTable as ContextSettings
from xrmq.actors.context.plan import Budget, context_plan
from xrmq.actors.edge.config import ConfigError
from xrmq.actors.edge.config_loader import decode_config
from xrmq.actors.explain import Problem, explain
from xrmq.actors.models import ScriptedLLM

ROOT = Path(__file__).resolve().parent.parent


def test_the_manager_the_plan_and_the_config_check_through_the_same_options():
    kwargs = {
        "incremental_context_topics": ("notes",),
        "topic_budget_bytes": {"notes": 2_000},
        "compaction_workers": 3,
        "namespace": "ctx",
    }
    options = context_options(**kwargs)
    assert isinstance(options, ContextOptions)
    assert context_plan(**kwargs) == plan_of(options)
    assert config_of(options) == context_config(
        incremental_context_topics=("notes",), topic_budget_bytes={"notes": 2_000}
    )
    manager = ContextManager(ScriptedLLM(), **kwargs)
    assert manager.plan == plan_of(options)


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"compaction_workers": 0}, "compaction_workers: must be a positive int, got 0"),
        ({"section_hosts": True}, "section_hosts: must be a positive int, got True"),
        (
            {"compaction_timeout_s": -1},
            "compaction_timeout_s: must be a positive number of seconds, got -1",
        ),
        (
            {"compaction_timeout_s": float("inf")},
            "compaction_timeout_s: must be a finite number, got inf",
        ),
        (
            {"namespace": "a\x00b"},
            "namespace: must be a non-empty string without NUL, got 'a\\x00b'",
        ),
        (
            {"dialogue_budget_bytes": "8000"},
            "dialogue_budget_bytes: must be a positive int of bytes, got '8000'",
        ),
    ],
)
def test_each_rule_comes_from_the_fields_meta_and_names_the_parameter(kwargs, message):
    with pytest.raises(ValueError) as plan_error:
        context_plan(**kwargs)
    assert str(plan_error.value) == message
    with pytest.raises(ValueError) as manager_error:
        ContextManager(ScriptedLLM(), **kwargs)
    assert str(manager_error.value) == message


def test_an_unknown_option_is_a_type_error_like_any_unknown_keyword():
    with pytest.raises(TypeError, match="unexpected keyword argument 'dialog_budget_bytes'"):
        context_options(dialog_budget_bytes=1)


def test_the_edge_table_is_held_to_the_same_budget_type_when_decoded():
    assert msgspec.structs.fields(ContextSettings)[1].type == Budget
    with pytest.raises(ConfigError) as error:
        decode_config({"context": {"dialogue_budget_bytes": 0}}, source="edge.toml")
    assert (error.value.key, error.value.rule) == (
        "context.dialogue_budget_bytes",
        "must be a positive int of bytes, got 0",
    )
    settings = decode_config({"context": {"topics": {"notes": {"mode": "incremental"}}}}).context
    assert settings.options() == context_options(**settings.manager_kwargs())


class Inner(msgspec.Struct, forbid_unknown_fields=True):
    count: Annotated[int, msgspec.Meta(ge=1)]
    ratio: float = 0.5


class Outer(msgspec.Struct, forbid_unknown_fields=True):
    items: list[Inner] = []
    limit: Annotated[int, msgspec.Meta(gt=0, description="a positive limit")] | None = None


@pytest.mark.parametrize(
    ("value", "problem"),
    [
        ({"itemz": []}, Problem(("itemz",), "unknown key; did you mean 'items'?")),
        ({"items": [{"count": 1}, {}]}, Problem(("items", 1, "count"), "is required")),
        ({"items": [{"count": 0}]}, Problem(("items", 0, "count"), "must be >= 1")),
        (
            {"items": [{"count": 1, "ratio": "x"}]},
            Problem(("items", 0, "ratio"), "must be a number, got a string"),
        ),
        ({"items": {}}, Problem(("items",), "must be an array, got a table")),
        ({"limit": 0}, Problem(("limit",), "must be a positive limit, got 0")),
        ({"limit": "x"}, Problem(("limit",), "must be an integer or nothing, got a string")),
        (
            {"items": [{"count": True}]},
            Problem(("items", 0, "count"), "must be an integer, got a boolean"),
        ),
    ],
)
def test_a_value_that_does_not_convert_is_explained_from_the_types_structure(value, problem):
    with pytest.raises(msgspec.ValidationError):
        msgspec.convert(value, Outer)
    assert explain(value, Outer) == problem


def test_a_problems_key_is_dotted_with_indexes_under_a_prefix():
    problem = Problem(("items", 1, "count"), "is required")
    assert (problem.key(), problem.key("box")) == ("items[1].count", "box.items[1].count")


def test_a_value_that_converts_has_nothing_to_explain():
    assert explain({"items": [{"count": 2}], "limit": 3}, Outer) is None


def test_no_config_module_parses_msgspecs_error_messages():
    for path in ("actors/edge/config.py", "actors/context/config.py", "actors/context/plan.py"):
        text = (ROOT / path).read_text(encoding="utf-8")
        assert (
            "unknown field `" not in text and "Expected `" not in text and " - at `" not in text
        ), path
