"""xrmq wire protocol: msgspec Structs only, no I/O.

Every type here is frozen (a decoded message can be shared by every subscriber in a
process without copies) and validates its rules on construction and on decode, raising
``ValueError`` that names the field and the rule.
"""

from .audio import AudioFrame, AudioPlayback
from .box import BoxInfo, BoxInfoRequest, DestinationInfo
from .context import CompactionPrompts, ContextBlock, ConversationContextUpdate
from .envelope import MessageMetadata
from .interaction import (
    ForgetFailure,
    Interrupted,
    ParticipantForgotten,
    ParticipantJoined,
    ParticipantLeft,
    ResponseOutput,
    UserQuery,
)
from .metrics import ProcessState, RuntimeMetrics, StreamTails, SupervisorReport
from .routing import Admission, AgentExchange, AgentTurn, DestinationResult, RoutingAid, TurnEnded
from .stages import CompactionTime, DestinationStages, SectionSize, ToolCallTime, TurnUsage
from .turns import STAGES, PlaybackStages, TurnRecord

__all__ = [
    "STAGES",
    "Admission",
    "AgentExchange",
    "AgentTurn",
    "AudioFrame",
    "AudioPlayback",
    "BoxInfo",
    "BoxInfoRequest",
    "CompactionPrompts",
    "CompactionTime",
    "ContextBlock",
    "ConversationContextUpdate",
    "DestinationInfo",
    "DestinationResult",
    "DestinationStages",
    "ForgetFailure",
    "Interrupted",
    "MessageMetadata",
    "ParticipantForgotten",
    "ParticipantJoined",
    "ParticipantLeft",
    "PlaybackStages",
    "ProcessState",
    "ResponseOutput",
    "RoutingAid",
    "RuntimeMetrics",
    "SectionSize",
    "StreamTails",
    "SupervisorReport",
    "ToolCallTime",
    "TurnEnded",
    "TurnRecord",
    "TurnUsage",
    "UserQuery",
]
