"""Tools on the bus and docs/tools.md's tiered compaction of a tool-calling transcript.

- ``Tool`` (``tool``): a typed function a model can call; ``serve_tools`` (``server``)
  serves tools on the bus; ``remote_tool``/``ToolSet`` (``client``) call them.
- ``ToolAgent`` (``tool_agent``): the routed destination running the tool loop.
- docs/tools.md: ``tiers`` (tier 1 and tier 2 as pure functions), ``transcript`` (one
  participant's transcript), ``policy`` (``AutoCompactor``), ``summary`` (tier 2's
  request and summarizers).
"""

from .client import RemoteTool, ToolSet, namespaced, remote_tool
from .policy import (
    ESCALATION_RATIO,
    AutoCompactor,
    AutoCompactReport,
    Compacting,
    CompactorAbstract,
)
from .server import ToolServer, serve_tools
from .tiers import (
    PLACEHOLDER,
    SummaryCompactResult,
    SummaryStatus,
    ToolCallCompactResult,
    compact_toolcall,
    estimated_message_length,
    plan_summary,
)
from .tool import Tool
from .tool_agent import EXTRACT_TOOL, ToolAgent
from .transcript import Transcript

__all__ = [
    "ESCALATION_RATIO",
    "EXTRACT_TOOL",
    "PLACEHOLDER",
    "AutoCompactReport",
    "AutoCompactor",
    "Compacting",
    "CompactorAbstract",
    "RemoteTool",
    "SummaryCompactResult",
    "SummaryStatus",
    "Tool",
    "ToolAgent",
    "ToolCallCompactResult",
    "ToolServer",
    "ToolSet",
    "Transcript",
    "compact_toolcall",
    "estimated_message_length",
    "namespaced",
    "plan_summary",
    "remote_tool",
    "serve_tools",
]
