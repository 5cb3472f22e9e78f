"""``/retry`` and ``/revise TEXT`` typed into ``xrmq chat`` on a terminal, against a running
edge box whose tools destination asks an OpenAI-compatible server on loopback that records
every request: the question asked again is sent without the taken-back exchange, neither
in the transcript's messages nor in the participant's shared context (the context
message), while the earlier exchange stays in both."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from xrmq.actors.conversation import CONTEXT_HEADER

from chat_terminal import chat_on_terminal, provider_box_config
from openai_server import OpenAIServer, Reply

KEPT = "The bench is clean, ZULU says."
RETRIED = "A multimeter, ALPHA says."
REVISED = "A soldering iron, BRAVO says."


def text_of(message: dict[str, Any]) -> str:
    content = message.get("content") or ""
    if isinstance(content, list):
        return " ".join(block.get("text", "") for block in content)
    return content


def split(request) -> tuple[str, list[str]]:
    """A request's context message, and every other message's text."""
    messages = [text_of(message) for message in request.body["messages"]]
    context = [text for text in messages if text.startswith(CONTEXT_HEADER)]
    assert len(context) == 1, messages
    return context[0], [text for text in messages if not text.startswith(CONTEXT_HEADER)]


def asking(server: OpenAIServer, question: str) -> list:
    """The requests whose last message asks ``question``."""
    return [r for r in server.requests if text_of(r.body["messages"][-1]) == question]


@pytest.mark.timeout(240)
async def test_retry_and_revise_send_the_model_neither_the_taken_back_answer_nor_question(
    monkeypatch,
):
    from xrmq.actors.edge.private_stack import PrivateStack

    monkeypatch.setenv("XRMQ_TEST_KEY", "sk-test")
    replies = [Reply(chunks=(text,)) for text in (KEPT, RETRIED, "A probe, CHARLIE.", REVISED)]
    with OpenAIServer(*replies) as server:
        config = provider_box_config(
            server.api_base, "lab-tools", "Lab tools: answers about the bench."
        )
        async with PrivateStack(config) as stack:
            with chat_on_terminal(stack.bus) as (terminal, chat):
                async with asyncio.timeout(200):
                    at = await terminal.read_until("you> ")
                    for line, answered in (
                        ("Is the bench clean?\n", KEPT),
                        ("What is on the bench?\n", RETRIED),
                        ("/retry\n", "A probe, CHARLIE."),
                        ("/revise Which iron is on the bench?\n", REVISED),
                    ):
                        terminal.type(line)
                        at = await terminal.read_until(f"lab-tools: {answered}", at)
                        at = await terminal.read_until("you> ", at)
                    terminal.type("/quit\n")
                    assert await asyncio.to_thread(chat.wait, 30) == 0
            assert not stack.failed
    first, retried = asking(server, "What is on the bench?")
    (revised,) = asking(server, "Which iron is on the bench?")

    # The first ask saw the earlier exchange in both places (so the context is rendered).
    context, transcript = split(first)
    assert KEPT in context and KEPT in transcript

    # /retry: the taken-back answer is nowhere; the question is asked once.
    context, transcript = split(retried)
    assert RETRIED not in context and RETRIED not in " ".join(transcript)
    assert "What is on the bench?" not in context
    assert transcript.count("What is on the bench?") == 1
    assert KEPT in context and KEPT in transcript

    # /revise: the old question (and the retried answer) is gone from both.
    context, transcript = split(revised)
    everything = context + " ".join(transcript)
    assert "What is on the bench?" not in everything
    assert "A probe, CHARLIE." not in everything
    assert KEPT in context and KEPT in transcript
