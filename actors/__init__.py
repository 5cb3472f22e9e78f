"""xrmq actors: the runtime and the built-in actors that run on it.

The public names are loaded on first use (PEP 562), so a sensor process that only
needs the runtime does not import the conversation, voice or model code.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ._lazy import lazy_exports

if TYPE_CHECKING:  # the same names, typed, for type checkers
    from xrmq.actors.context import ContextManager
    from xrmq.actors.conversation import Conversation
    from xrmq.actors.interaction import Reply, ResponseOutputs
    from xrmq.actors.models import (
        ChatMessage,
        ChatOptions,
        LiteLLMService,
        LLMService,
        ModelError,
        ModelSpec,
        OfflineLLM,
        ScriptedLLM,
        ScriptedResponse,
        create_llm,
    )
    from xrmq.actors.routing import (
        AgentRouter,
        KeywordDecisions,
        LLMDecisions,
        RoutableAgent,
        SingleDestination,
        remote,
        serve,
    )
    from xrmq.actors.runtime import (
        Agent,
        AgentRuntime,
        RuntimeClosedError,
        RuntimeContext,
        subscribe,
    )
    from xrmq.actors.voice import VoiceRenderer

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

__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS)
