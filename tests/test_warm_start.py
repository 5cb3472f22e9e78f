"""A process with a real model prepares it before it reports ready (issue 17, item 3):
litellm is imported and its first-call work done while the process is not yet serving,
so the first turn after a (re)start is no slower than the second (``python -m bench turn``
measures it: "first turn after a conversation restart")."""

from __future__ import annotations

import subprocess
import sys

import pytest

from xrmq.actors.models import ChatMessage, LiteLLMService, OfflineLLM

from openai_server import OpenAIServer, Reply

pytestmark = pytest.mark.timeout(120)  # litellm's import takes seconds on a loaded machine

BUILD_ROLE = """
import sys
from xrmq.actors.edge.config import decode_config
from xrmq.actors.edge.stack import conversation_role
from xrmq.actors.runtime import AgentRuntime
config = decode_config({{
    "models": {{"answers": {{"model": "openai/gpt-4o-mini", "api_base": "{api_base}"}}}},
    "context": {{"topics": {{"notes": {{"mode": "incremental"}}}}}},
    "destinations": {{"conversation": {{"description": "General assistant."}}}},
    "processes": {{"conversation": {{"roles": ["conversation"]}}}},
}})
before = "litellm" in sys.modules
conversation_role(AgentRuntime("ipc:///nowhere/bus"), config, config.instances("conversation")[0])
print(before, "litellm" in sys.modules, "litellm.llms.openai.openai" in sys.modules)
"""


def test_the_conversation_role_prepares_its_model_before_the_process_is_ready():
    with OpenAIServer(Reply()) as server:
        result = subprocess.run(
            [sys.executable, "-c", BUILD_ROLE.format(api_base=server.api_base)],
            capture_output=True,
            text=True,
            timeout=100,
            env={"PATH": "/usr/bin:/bin", "OPENAI_API_KEY": "sk-test"},
        )
    assert result.returncode == 0, result.stderr[-2000:]
    assert result.stdout.split() == [
        "False",
        "True",
        "True",
    ]  # imported, and the provider's code loaded
    assert server.requests == []  # preparing reaches no provider


async def test_a_prepared_service_answers_through_the_provider_as_before():
    with OpenAIServer(Reply(chunks=("Hello", " there"))) as server:
        llm = LiteLLMService(
            "openai/gpt-4o-mini", api_base=server.api_base, api_key="sk-test", retries=0
        )
        llm.prepare()
        assert server.requests == []
        completion = await llm.complete([ChatMessage("user", "Hi")])
    assert completion.text == "Hello there" and len(server.requests) == 1


def test_the_offline_model_has_nothing_to_prepare():
    OfflineLLM().prepare()
