"""Tool-test helpers shared by the tool agent's tests: a probe tool and a scripted session model."""

from __future__ import annotations

import json
import re
from collections.abc import Iterable
from typing import Any

import msgspec

from xrmq.actors.models import ChatRequest, ScriptedLLM, ScriptedResponse, ToolCall, Usage
from xrmq.actors.tools.policy import Compacting, CompactorAbstract
from xrmq.actors.tools.tiers import placeholder
from xrmq.actors.tools.tool_agent import EXTRACT_TOOL, ToolAgent
from xrmq.schemas import AgentTurn
from xrmq.topics import VOICE_OUTPUT_TOPIC


class Probe(msgspec.Struct):
    index: int


def tool_agent(runtime: Any, llm: Any, *, context: Any = None, **options: Any) -> ToolAgent:
    """A tool agent on ``runtime`` answering to the voice output topic, with a
    ``FakeContext`` unless given one (``options``: the rest of ``ToolAgent`` 's)."""
    from router_doubles import FakeContext

    return ToolAgent(
        llm,
        context=context if context is not None else FakeContext(),
        runtime=runtime,
        output_topic=VOICE_OUTPUT_TOPIC,
        **options,
    )


def turn(turn_id: str, text: str, participant: str = "p1") -> AgentTurn:
    return AgentTurn(participant, turn_id, text, timestamp_us=1_714_574_587_000_000)


async def never_started() -> None:
    return None


def request_tokens(request: ChatRequest) -> int:
    return (
        sum(len(m.content) + sum(len(c.arguments) for c in m.tool_calls) for m in request.messages)
        // 4
    )


SECRET = {7: "kappa-7731", 190: "sigma-0190"}


def probe_reading(args: Probe) -> str:
    """A long reading; a few carry a value that appears nowhere else."""
    value = SECRET.get(args.index, f"nominal-{args.index}")
    return f"Probe {args.index} full log: " + "steady signal; " * 120 + f"calibration code {value}."


def session_model() -> ScriptedLLM:
    """Calls the probe for 'Read probe N', asks for a reclaimed original for 'code of probe N'."""

    def respond(request: ChatRequest) -> ScriptedResponse:
        usage = Usage(total_tokens=request_tokens(request))
        if "Summarize the earlier part" in request.messages[0].content:
            ids = sorted(
                set(re.findall(r"\br\d+\b", request.messages[1].content)), key=lambda i: int(i[1:])
            )
            return ScriptedResponse(
                "Probes were read in order; results by call ID: " + " ".join(ids), usage=usage
            )
        last_user = max(i for i, m in enumerate(request.messages) if m.role == "user")
        question, after = request.messages[last_user].content, request.messages[last_user + 1 :]
        index = int(re.findall(r"\d+", question)[-1])
        results = [m.content for m in after if m.role == "tool"]
        if not results:
            if question.startswith("Read"):
                return ScriptedResponse(
                    usage=usage,
                    tool_calls=(ToolCall(f"r{index}", "probe", json.dumps({"index": index})),),
                )
            seen = [
                m
                for m in request.messages
                if m.content == placeholder(f"r{index}")
                or (re.search(rf"\br{index}\b", m.content) and m.role == "system")
            ]
            assert seen, "the model only extracts what a placeholder or the summary names"
            return ScriptedResponse(
                usage=usage,
                tool_calls=(
                    ToolCall("x1", EXTRACT_TOOL.name, json.dumps({"toolcall_id": f"r{index}"})),
                ),
            )
        if question.startswith("Read"):
            return ScriptedResponse(f"Probe {index} read.", usage=usage)
        code = re.search(r"calibration code (\S+)\.", results[-1])
        return ScriptedResponse(
            f"Probe {index} code is {code.group(1) if code else 'unknown'}.", usage=usage
        )

    return ScriptedLLM(default=respond)


class RecordingCompactor(CompactorAbstract):
    """A custom strategy that compacts nothing and records each call (participant, messages)."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, int]] = []

    async def auto_compact(self, agent: Compacting) -> None:
        self.calls.append((agent.participant_id, len(agent.conversation.all_messages())))


def plain(messages: Iterable[Any]) -> list[dict[str, Any]]:
    """A transcript's messages (OpenAI's typed chat messages) as plain dicts, for asserts."""
    return [dict(message) for message in messages]
