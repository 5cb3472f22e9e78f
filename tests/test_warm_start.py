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
from xrmq.actors.edge.config_loader import decode_config
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


IMPORT_OFF_LOOP = """
import asyncio
import sys
import threading

from xrmq.actors.models import ChatMessage, LiteLLMService
from xrmq.actors.models import litellm_service

imported_on = []
real_import = litellm_service.import_litellm


def watched_import():
    if "litellm" not in sys.modules:
        imported_on.append(threading.current_thread() is threading.main_thread())
    return real_import()


litellm_service.import_litellm = watched_import


async def main():
    llm = LiteLLMService("openai/gpt-4o-mini", mock_response="Hello there")
    completion = await llm.complete([ChatMessage("user", "Hi")])
    print(imported_on, completion.text)


asyncio.run(main())
"""


def test_a_service_imports_litellm_off_the_event_loop_at_its_first_call():
    """The turn suite's first turn on a service without ``prepare()``: importing litellm on
    the event loop stopped the whole process for seconds (its heartbeat and its answers to
    status checks too), so the router took the destination for dead and failed the turn.
    A fresh interpreter, so the import is real: it ran on a thread, not the loop's."""
    result = subprocess.run(
        [sys.executable, "-c", IMPORT_OFF_LOOP],
        capture_output=True,
        text=True,
        timeout=100,
        env={"PATH": "/usr/bin:/bin"},
    )
    assert result.returncode == 0, result.stderr[-2000:]
    assert result.stdout.split() == ["[False]", "Hello", "there"]


def test_the_offline_model_has_nothing_to_prepare():
    OfflineLLM().prepare()
