"""ModelSpec from TOML, presets, and the factory."""

from __future__ import annotations

from pathlib import Path

import pytest

from xrmq.actors.models import (
    PRESETS,
    LiteLLMService,
    ModelSpec,
    OfflineLLM,
    create_llm,
    load_model_spec,
    parse_model_spec,
)


def write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "edge.toml"
    path.write_text(text)
    return path


def test_full_table_loads_from_toml(tmp_path: Path) -> None:
    path = write(
        tmp_path,
        """
        [model]
        model = "anthropic/claude-haiku-4-5"
        timeout_s = 20
        temperature = 0.2
        max_tokens = 512
        retries = 1
        thinking_off = { reasoning_effort = "none" }
        options = { top_p = 0.9 }
        """,
    )
    assert load_model_spec(path) == ModelSpec(
        model="anthropic/claude-haiku-4-5",
        timeout_s=20,
        temperature=0.2,
        max_tokens=512,
        retries=1,
        thinking_off={"reasoning_effort": "none"},
        options={"top_p": 0.9},
    )


def test_preset_name_or_preset_with_overrides(tmp_path: Path) -> None:
    assert load_model_spec(write(tmp_path, 'model = "offline"\n')) == PRESETS["offline"]
    spec = load_model_spec(
        write(tmp_path, '[agents.model]\npreset = "local"\napi_base = "http://box:8000/v1"\n'),
        table="agents.model",
    )
    assert spec.api_base == "http://box:8000/v1"
    assert (
        spec.model == PRESETS["local"].model and spec.thinking_off == PRESETS["local"].thinking_off
    )


def test_presets_disable_thinking_for_their_reasoning_models() -> None:
    assert set(PRESETS) == {"offline", "hosted", "local"}
    assert PRESETS["hosted"].thinking_off and PRESETS["local"].thinking_off
    assert PRESETS["local"].api_base


@pytest.mark.parametrize(
    ("value", "message"),
    [
        ({"model": "x", "timeout_s": 0}, r"^ModelSpec.timeout_s: must be positive$"),
        (
            {"model": "x", "timeout_s": "soon"},
            r"^ModelSpec.timeout_s: must be a number, got a string$",
        ),
        ({"model": "x", "max_tokens": 0}, r"^ModelSpec.max_tokens: must be positive$"),
        (
            {"model": "x", "colour": "red"},
            r"^ModelSpec.colour: unknown key \(allowed: model, api_base, .*tokens_per_second\)$",
        ),
        (
            {"model": "x", "temprature": 0.2},
            r"^ModelSpec.temprature: .*did you mean 'temperature'\?$",
        ),
        ({"timeout_s": 3}, r"^ModelSpec.model: is required$"),
        ("gpt", r"^ModelSpec.preset: must be one of hosted, local, offline, not 'gpt'$"),
    ],
)
def test_bad_specs_raise_value_error_naming_the_field_and_rule(value: object, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        parse_model_spec(value)  # type: ignore[arg-type]


def test_missing_table_and_invalid_toml_raise_value_error(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match=r"no 'model' entry"):
        load_model_spec(write(tmp_path, "[other]\nx = 1\n"))
    with pytest.raises(ValueError, match=r"invalid TOML"):
        load_model_spec(write(tmp_path, "model = \n"))


def test_factory_builds_the_offline_model_with_its_pacing() -> None:
    llm = create_llm(ModelSpec(model="offline", time_to_first_token_s=0, tokens_per_second=0))
    assert isinstance(llm, OfflineLLM)
    assert (llm.time_to_first_token_s, llm.tokens_per_second) == (0, 0)
    assert isinstance(create_llm("offline"), OfflineLLM)


def test_factory_builds_a_litellm_service_from_a_spec(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("XRMQ_TEST_KEY", "sk-test")
    spec = parse_model_spec(
        {
            "preset": "local",
            "api_key_env": "XRMQ_TEST_KEY",
            "max_tokens": 256,
            "options": {"top_p": 0.5},
        }
    )
    llm = create_llm(spec)
    assert isinstance(llm, LiteLLMService)
    assert (llm.model, llm.api_base, llm.max_tokens, llm.timeout_s) == (
        spec.model,
        spec.api_base,
        256,
        30.0,
    )
    assert llm.thinking_off == spec.thinking_off and llm.provider_options == {"top_p": 0.5}
    assert "sk-test" not in repr(llm)


def test_factory_fails_at_startup_when_the_key_variable_is_unset(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    with pytest.raises(
        ValueError, match=r"^ModelSpec.api_key_env: environment variable OPENAI_API_KEY is not set$"
    ):
        create_llm("hosted")


async def test_a_configured_offline_model_answers_offline() -> None:
    from xrmq.actors.models import ChatMessage

    llm = create_llm(
        parse_model_spec({"preset": "offline", "time_to_first_token_s": 0, "tokens_per_second": 0})
    )
    completion = await llm.complete(
        [
            ChatMessage("system", "s"),
            ChatMessage("user", "lamp: blue"),
            ChatMessage("user", "What colour is the lamp?"),
        ]
    )
    assert completion.text == "Lamp: blue."
