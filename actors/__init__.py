"""xrmq actors: the runtime and the built-in actors that run on it.

The public names are loaded on first use (PEP 562), so a sensor process that only
needs the runtime does not import the conversation, voice or model code.
"""

from __future__ import annotations

import importlib
from typing import Any

_EXPORTS = {
    "AgentRuntime": "xrmq.actors.runtime",
    "Agent": "xrmq.actors.runtime",
    "RuntimeContext": "xrmq.actors.runtime",
    "RuntimeClosedError": "xrmq.actors.runtime",
    "subscribe": "xrmq.actors.runtime",
    "Publisher": "xrmq.actors.publisher",
    "GLOBAL": "xrmq.actors.runtime",
    "ResponseOutputs": "xrmq.actors.interaction",
    "ContextManager": "xrmq.actors.context",
    "Conversation": "xrmq.actors.conversation",
    "AgentRouter": "xrmq.actors.routing",
    "RoutableAgent": "xrmq.actors.routing",
    "SingleDestination": "xrmq.actors.routing",
    "KeywordDecisions": "xrmq.actors.routing",
    "LLMDecisions": "xrmq.actors.routing",
    "remote": "xrmq.actors.routing",
    "serve": "xrmq.actors.routing",
    "Reply": "xrmq.actors.interaction",
    "VoiceRenderer": "xrmq.actors.voice",
    "LLMService": "xrmq.actors.models",
    "LiteLLMService": "xrmq.actors.models",
    "OfflineLLM": "xrmq.actors.models",
    "ScriptedLLM": "xrmq.actors.models",
    "ScriptedResponse": "xrmq.actors.models",
    "ChatMessage": "xrmq.actors.models",
    "ChatOptions": "xrmq.actors.models",
    "ModelError": "xrmq.actors.models",
    "ModelSpec": "xrmq.actors.models",
    "create_llm": "xrmq.actors.models",
}

__all__ = sorted(_EXPORTS)


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'xrmq.actors' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_EXPORTS))
