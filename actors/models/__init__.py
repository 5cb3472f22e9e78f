"""Model services: the typed streamed chat interface and its implementations.

``LLMService`` is what answers, compaction and routing call; ``LiteLLMService`` reaches
real providers, ``OfflineLLM`` is the built-in deterministic default, ``ScriptedLLM``
plays back scripted responses for tests. ``ModelSpec``/``create_llm`` build one from
configuration. Importing this package does not import litellm.
"""

from xrmq.actors.prompts.compaction import (
    COMPACTION_LIMIT_PATTERN,
    compaction_limit,
    compaction_limit_instruction,
)

from .config import OFFLINE_MODEL, PRESETS, ModelSpec, create_llm, load_model_spec, parse_model_spec
from .errors import (
    ContextWindowExceeded,
    ModelError,
    ModelRateLimited,
    ModelRequestRejected,
    ModelTimeout,
    ModelUnavailable,
)
from .litellm_service import REASONING_OFF, LiteLLMService
from .offline import OfflineLLM
from .scripted import ScriptedLLM, ScriptedResponse
from .service import ChatStream, LLMService
from .types import (
    ChatCompletion,
    ChatMessage,
    ChatOptions,
    ChatRequest,
    ChatResult,
    FinishReason,
    Role,
    ToolCall,
    ToolSpec,
    Usage,
)

__all__ = [
    "COMPACTION_LIMIT_PATTERN",
    "OFFLINE_MODEL",
    "PRESETS",
    "REASONING_OFF",
    "ChatCompletion",
    "ChatMessage",
    "ChatOptions",
    "ChatRequest",
    "ChatResult",
    "ChatStream",
    "ContextWindowExceeded",
    "FinishReason",
    "LLMService",
    "LiteLLMService",
    "ModelError",
    "ModelRateLimited",
    "ModelRequestRejected",
    "ModelSpec",
    "ModelTimeout",
    "ModelUnavailable",
    "OfflineLLM",
    "Role",
    "ScriptedLLM",
    "ScriptedResponse",
    "ToolCall",
    "ToolSpec",
    "Usage",
    "compaction_limit",
    "compaction_limit_instruction",
    "create_llm",
    "load_model_spec",
    "parse_model_spec",
]
