"""The public names docs/design.md promises are importable from their packages."""

import xrmq.actors
import xrmq.schemas
import xrmq.topics

PUBLIC_ACTORS = [
    "AgentRuntime",
    "Agent",
    "RuntimeContext",
    "subscribe",
    "ResponseOutputs",
    "Reply",
    "ContextManager",
    "Conversation",
    "AgentRouter",
    "VoiceRenderer",
    "LLMService",
    "LiteLLMService",
    "OfflineLLM",
    "ScriptedLLM",
    "Tool",
    "ToolAgent",
    "ToolSet",
    "remote_tool",
    "serve_tools",
]
PUBLIC_SCHEMAS = [
    "UserQuery",
    "ResponseOutput",
    "Interrupted",
    "ParticipantJoined",
    "ParticipantLeft",
    "ConversationContextUpdate",
    "ContextBlock",
    "CompactionPrompts",
    "AgentTurn",
    "AgentExchange",
    "RoutingAid",
    "Admission",
    "DestinationResult",
    "MessageMetadata",
]
PUBLIC_TOPICS = [
    "Topic",
    "VOICE_OUTPUT_TOPIC",
    "QUERY_TOPIC",
    "INTERRUPTED_TOPIC",
    "PARTICIPANT_JOINED_TOPIC",
    "PARTICIPANT_LEFT_TOPIC",
    "context_topic",
]


def test_every_design_name_is_exported():
    for module, names in (
        (xrmq.actors, PUBLIC_ACTORS),
        (xrmq.schemas, PUBLIC_SCHEMAS),
        (xrmq.topics, PUBLIC_TOPICS),
    ):
        missing = [name for name in names if not hasattr(module, name)]
        assert missing == [], f"{module.__name__} lacks {missing}"
