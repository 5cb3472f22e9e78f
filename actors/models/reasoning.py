"""What turns a model's reasoning off, per provider family: the ``reasoning_effort`` it accepts.

Why: compaction and routing requests must not think (latency, cost), but providers
disagree on how to say so, and litellm drops a value a model does not accept
(``drop_params``), so one fixed value silently leaves reasoning on somewhere
(``"none"`` on ``openai/gpt-5-mini``). The lowest effort each family accepts:

- Anthropic, Bedrock, Gemini, Vertex: ``"none"``, which litellm maps to thinking
  disabled (Anthropic), a zero thinking budget (Gemini 2.5) or the lowest thinking level
  (Gemini 3). Gemini 2.5 Pro cannot think less than its minimum: ``"minimal"``.
- Every other provider (OpenAI and the OpenAI-compatible hosts): what litellm's model map
  says the model accepts, lowest first: ``"none"`` (gpt-5.1 and later), ``"minimal"``
  (gpt-5, gpt-5-mini), else ``"low"`` (the o-series, gpt-oss).

A model litellm does not know as a reasoning model gets nothing; a config sets
``thinking_off`` for those (e.g. the ``local`` preset's chat-template switch).
"""

from __future__ import annotations

from collections.abc import Mapping
from types import ModuleType
from typing import Any

_NONE_FAMILIES = frozenset(
    {"anthropic", "bedrock", "bedrock_converse", "gemini", "vertex_ai", "vertex_ai_beta"}
)
_ORDER = ("none", "minimal")


def _model_info(litellm: ModuleType, model: str, provider: str) -> Mapping[str, Any]:
    """The model map's entry, also under the bare name (``azure/gpt-5-mini`` -> ``gpt-5-mini``),
    where the per-level flags of a hosted copy often live."""
    cost = litellm.model_cost
    name = model.split("/", 1)[1] if model.startswith(f"{provider}/") else model
    for key in (model, name, name.split("/", 1)[-1]):
        entry = cost.get(key)
        if isinstance(entry, Mapping) and any(
            flag in entry
            for flag in ("supports_none_reasoning_effort", "supports_minimal_reasoning_effort")
        ):
            return entry
    for key in (model, name):
        entry = cost.get(key)
        if isinstance(entry, Mapping):
            return entry
    return {}


def reasoning_off(litellm: ModuleType, model: str) -> dict[str, Any]:
    """The request parameters that turn ``model``'s reasoning off (or as low as it goes);
    ``{}`` for a model litellm does not report as a reasoning model."""
    try:
        _, provider, _, _ = litellm.get_llm_provider(model=model)
        reasons = bool(litellm.supports_reasoning(model=model))
    except Exception:
        return {}
    if not reasons:
        return {}
    if provider in _NONE_FAMILIES:
        return {"reasoning_effort": "minimal" if "gemini-2.5-pro" in model else "none"}
    info = _model_info(litellm, model, provider)
    for level in _ORDER:
        if info.get(f"supports_{level}_reasoning_effort") is True:
            return {"reasoning_effort": level}
    return {"reasoning_effort": "low"}
