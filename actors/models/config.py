"""Model configuration: ``ModelSpec``, the presets, TOML loading, and the one factory.

A config names a model in one of two ways:

```toml
model = "local"            # a preset by name

[model]                    # or a table: a preset (optional) plus overrides
preset = "local"
api_base = "http://edge-box:8000/v1"
```

``create_llm`` turns a spec into an ``LLMService``: ``model = "offline"`` is the built-in
``OfflineLLM``; anything else is a litellm model string for ``LiteLLMService``. API keys
never sit in a config: ``api_key_env`` names the environment variable that holds one
(without it, litellm reads the provider's usual variable, e.g. ``OPENAI_API_KEY``).
"""

from __future__ import annotations

import os
import tomllib
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import msgspec

from xrmq.actors.explain import explain

from .litellm_service import LiteLLMService
from .offline import OfflineLLM
from .service import LLMService

OFFLINE_MODEL = "offline"


def _require(condition: bool, field: str, rule: str) -> None:
    if not condition:
        raise ValueError(f"ModelSpec.{field}: {rule}")


class ModelSpec(msgspec.Struct, frozen=True, forbid_unknown_fields=True, kw_only=True):
    """One model's configuration."""

    model: str
    """``"offline"`` for the built-in model, else a litellm model string."""
    api_base: str | None = None
    """Server URL, for a local or self-hosted OpenAI-compatible server."""
    api_key_env: str | None = None
    """Name of the environment variable holding the API key."""
    timeout_s: float = 60.0
    """Bound on the wait for the first chunk and for each later chunk."""
    temperature: float | None = None
    """Default sampling temperature (0 to 2); ``None`` leaves the provider's."""
    max_tokens: int | None = None
    """Default output-token limit; ``None`` leaves the provider's."""
    retries: int = 2
    """Retries of a failure before the first chunk (timeouts, rate limits, outages)."""
    thinking_off: dict[str, Any] | None = None
    """Provider parameters that disable reasoning, sent with requests that ask for it
    (compaction, routing); ``None`` lets litellm disable it on models it knows reason."""
    options: dict[str, Any] = {}
    """Extra provider options passed to every litellm call unchanged."""
    time_to_first_token_s: float = 0.25
    """Offline model only: the wait before the first chunk."""
    tokens_per_second: float = 40.0
    """Offline model only: streaming rate; 0 streams without pacing."""

    def __post_init__(self) -> None:
        _require(bool(self.model and self.model.strip()), "model", "must be non-empty text")
        _require(self.timeout_s > 0, "timeout_s", "must be positive")
        _require(
            self.temperature is None or 0 <= self.temperature <= 2,
            "temperature",
            "must be between 0 and 2",
        )
        _require(self.max_tokens is None or self.max_tokens > 0, "max_tokens", "must be positive")
        _require(self.retries >= 0, "retries", "must be non-negative")
        _require(self.time_to_first_token_s >= 0, "time_to_first_token_s", "must be non-negative")
        _require(
            self.tokens_per_second >= 0, "tokens_per_second", "must be non-negative (0: no pacing)"
        )


PRESETS: Mapping[str, ModelSpec] = {
    "offline": ModelSpec(model=OFFLINE_MODEL),
    # A hosted reasoning model: minimal reasoning for compaction and routing requests.
    "hosted": ModelSpec(
        model="openai/gpt-5-mini",
        api_key_env="OPENAI_API_KEY",
        timeout_s=60.0,
        thinking_off={"reasoning_effort": "minimal"},
    ),
    # A local OpenAI-compatible server (vLLM, llama.cpp, SGLang) serving a Qwen3 model,
    # whose chat template turns thinking off per request.
    "local": ModelSpec(
        model="hosted_vllm/Qwen/Qwen3-4B",
        api_base="http://127.0.0.1:8000/v1",
        timeout_s=30.0,
        thinking_off={"extra_body": {"chat_template_kwargs": {"enable_thinking": False}}},
    ),
}
"""Named starting points; a config table can name one with ``preset`` and override fields."""


def parse_model_spec(value: str | Mapping[str, Any]) -> ModelSpec:
    """A spec from a preset name, or from a table of fields with an optional ``preset``.

    Raises ``ValueError`` naming the field and the rule for an unknown preset, an unknown
    field, a wrong type or a value out of range.
    """
    if isinstance(value, str):
        return _preset(value)
    if not isinstance(value, Mapping):
        raise ValueError("ModelSpec: must be a preset name or a table of fields")
    fields = dict(value)
    preset = fields.pop("preset", None)
    if preset is not None:
        fields = msgspec.structs.asdict(_preset(preset)) | fields
    try:
        return msgspec.convert(fields, ModelSpec)
    except msgspec.ValidationError as exc:
        problem = explain(fields, ModelSpec)  # read from the type's structure, not the text
        if problem is None:  # a rule of ModelSpec.__post_init__: its message is already named
            raise ValueError(str(exc)) from None
        raise ValueError(f"ModelSpec.{problem.key()}: {problem.rule}") from None


def load_model_spec(path: str | os.PathLike[str], *, table: str | None = "model") -> ModelSpec:
    """Read a spec from a TOML file: the key ``table`` (dotted for nesting; a preset name or
    a table), or the whole document when ``table`` is ``None``."""
    with Path(path).open("rb") as file:
        try:
            value: Any = tomllib.load(file)
        except tomllib.TOMLDecodeError as exc:
            raise ValueError(f"{path}: invalid TOML: {exc}") from None
    if table is not None:
        for key in table.split("."):
            if not isinstance(value, Mapping) or key not in value:
                raise ValueError(f"{path}: no {table!r} entry")
            value = value[key]
    return parse_model_spec(value)


def create_llm(spec: ModelSpec | str) -> LLMService:
    """The service a spec (or a preset name) describes.

    Raises ``ValueError`` when ``api_key_env`` names a variable that is not set, so a
    missing key fails at startup rather than at the first request.
    """
    if isinstance(spec, str):
        spec = _preset(spec)
    if spec.model == OFFLINE_MODEL:
        return OfflineLLM(
            time_to_first_token_s=spec.time_to_first_token_s,
            tokens_per_second=spec.tokens_per_second,
        )
    api_key = None
    if spec.api_key_env is not None:
        api_key = os.environ.get(spec.api_key_env)
        _require(
            api_key is not None,
            "api_key_env",
            f"environment variable {spec.api_key_env} is not set",
        )
    return LiteLLMService(
        spec.model,
        api_base=spec.api_base,
        api_key=api_key,
        timeout_s=spec.timeout_s,
        temperature=spec.temperature,
        max_tokens=spec.max_tokens,
        retries=spec.retries,
        thinking_off=spec.thinking_off,
        **spec.options,
    )


def _preset(name: object) -> ModelSpec:
    if not isinstance(name, str) or name not in PRESETS:
        raise ValueError(
            f"ModelSpec.preset: must be one of {', '.join(sorted(PRESETS))}, not {name!r}"
        )
    return PRESETS[name]
