"""The tools agent's state is a ``Conversation``: after a tool-calling turn it holds the
seed's shape (OpenAI's typed chat messages), the provider receives those dictionaries as
they are (reasoning under the model's own field, image blocks as stored), and whether the
token count was estimated survives a restart of the agent and of the store."""

from __future__ import annotations

import base64
from typing import Any

import msgspec
from tools_doubles import Probe, never_started, probe_reading, tool_agent

from xrmq.actors.context.store import open_store
from xrmq.actors.models import LiteLLMService, ScriptedLLM, ScriptedResponse, ToolCall
from xrmq.actors.runtime import AgentRuntime
from xrmq.actors.tools.conversation_state import Conversation
from xrmq.actors.tools.policy import AutoCompactor
from xrmq.actors.tools.store import TranscriptCounters, TranscriptHeader, register_transcripts
from xrmq.actors.tools.tool import Tool
from xrmq.actors.tools.tool_agent import ToolAgent
from xrmq.schemas import AgentTurn

from openai_server import OpenAIServer, Reply

IMAGE = "data:image/png;base64," + base64.b64encode(b"\x89PNG fake").decode()
ARGUMENTS = '{"index": 1}'


def question(turn_id: str, text: str, images: tuple[str, ...] = ()) -> AgentTurn:
    return AgentTurn("p1", turn_id, text, timestamp_us=1_714_574_587_000_000, images=images)


async def test_a_tool_calling_turn_is_stored_in_the_seeds_shape_and_sent_back_verbatim() -> None:
    replies = (
        Reply(
            chunks=(),
            reasoning="The probe tool reads it.",
            tool_calls=({"id": "call_1", "name": "probe", "arguments": ARGUMENTS},),
        ),
        Reply(chunks=("Probe 1 reads 3.",)),
        Reply(chunks=("It was 3.",)),
    )
    with OpenAIServer(*replies) as server:
        llm = LiteLLMService("openai/m", api_base=server.api_base, api_key="sk-test", retries=0)
        async with AgentRuntime() as runtime:
            agent = tool_agent(
                runtime,
                llm,
                tools=[Tool("probe", "Read a probe.", Probe, probe_reading)],
            )
            await agent.answer(question("t1", "Read probe 1.", (IMAGE,)), started=never_started)
            held = agent.transcript("p1").conversation.messages
            await agent.answer(question("t2", "What was it?"), started=never_started)
    first_turn: list[dict[str, Any]] = [
        {
            "role": "user",
            "content": [
                {"type": "text", "text": "Read probe 1."},
                {"type": "image_url", "image_url": {"url": IMAGE}},
            ],
        },
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {
                    "id": "call_1",
                    "type": "function",
                    "function": {"name": "probe", "arguments": ARGUMENTS},
                }
            ],
            "reasoning_content": "The probe tool reads it.",
        },
        {"role": "tool", "tool_call_id": "call_1", "content": probe_reading(Probe(1))},
        {"role": "assistant", "content": "Probe 1 reads 3."},
    ]
    assert held[:4] == first_turn
    sent = server.requests[2].body["messages"]
    # After the system message and the shared context; the one difference on the wire is
    # the OpenAI client's: it leaves out a null ``content`` beside tool calls.
    without_null = {key: value for key, value in first_turn[1].items() if value is not None}
    assert sent[2:6] == [first_turn[0], without_null, *first_turn[2:]]
    assert sent[6] == {"role": "user", "content": "What was it?"}


async def test_reasoning_goes_back_under_the_field_the_model_used() -> None:
    """litellm names streamed reasoning ``reasoning_content`` whatever the provider sent; a
    stream that says ``reasoning`` (a raw delta) is stored and sent back under that name."""
    llm = ScriptedLLM(
        ScriptedResponse(
            tool_calls=(ToolCall("e1", "echo", "{}"),),
            reasoning="I should echo.",
            reasoning_field="reasoning",
        ),
        "Echoed.",
    )
    async with AgentRuntime() as runtime:
        agent = tool_agent(
            runtime,
            llm,
            tools=[Tool("echo", "Echo.", Probe, lambda args: "echo")],
        )
        await agent.answer(question("t1", "Echo."), started=never_started)
    assistant = agent.transcript("p1").conversation.messages[1]
    assert assistant.get("reasoning") == "I should echo." and "reasoning_content" not in assistant
    assert llm.requests[1].openai[3] == assistant  # the next request: the same dictionary


async def test_whether_the_token_count_was_estimated_survives_a_restart(tmp_path) -> None:
    path = tmp_path / "context-0.sqlite3"

    async def ask(llm: ScriptedLLM, text: str) -> ToolAgent:
        store = open_store(path)
        front = AgentRuntime(name="front")
        back = AgentRuntime(front.address, name="back")
        register_transcripts(back, "lab-tools", store=store)
        async with front, back:
            agent = tool_agent(
                front,
                llm,
                transcripts="lab-tools",
                compactor=AutoCompactor(enabled=False),
            )
            await agent.answer(question(text, text), started=never_started)
            await agent.mirrored()
            assert agent.transcript("p1").tokens_estimated  # ScriptedLLM reports no usage
            restarted = tool_agent(
                front,
                llm,
                transcripts="lab-tools",
            )
            await restarted.conversation("p1")  # loads the transcript from the store
        store.close()
        return restarted

    first = await ask(ScriptedLLM("Fine."), "Hello.")
    counted = first.transcript("p1").total_tokens
    assert counted is not None and first.transcript("p1").tokens_estimated
    store = open_store(path)  # the store restarted: the journal's header
    header = msgspec.msgpack.decode(store.transcripts["p1", "lab-tools"].header, type=dict)
    store.close()
    assert header["tokens_estimated"] is True and header["total_tokens"] == counted


def test_a_header_and_a_dump_written_before_tokens_estimated_load_as_not_estimated() -> None:
    old = {
        "summary": None,
        "total_tokens": 50,
        "counters": msgspec.to_builtins(TranscriptCounters()),
        "revision": 1,
    }
    header = msgspec.msgpack.decode(msgspec.msgpack.encode(old), type=TranscriptHeader)
    assert header.total_tokens == 50 and header.tokens_estimated is False
    assert Conversation.loads('{"messages": [], "tokens_used": 50}').tokens_estimated is False
    estimated = Conversation(total_tokens=50, tokens_estimated=True)
    assert Conversation.loads(estimated.dumps()).tokens_estimated is True
