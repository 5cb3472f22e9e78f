"""Realtime destinations on the edge box: ``[destinations.X] kind = "realtime"`` in the
config (decoded, checked, built), their gauges in ``xrmq top``, and ``xrmq demo --realtime``
as the installed command."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
from pathlib import Path

import pytest
from realtime_helpers import WAIT_S, ScriptedEars

from xrmq.actors.edge.checks import check_can_answer
from xrmq.actors.edge.config import ConfigError
from xrmq.actors.edge.config_loader import load_config
from xrmq.actors.edge.configfile import write_config
from xrmq.actors.edge.top import TopView, render
from xrmq.actors.realtime.config import RealtimeConfig
from xrmq.schemas import RuntimeMetrics

from buses import processes_mentioning

pytestmark = pytest.mark.timeout(60)

BASE = """
[processes.context]
roles = ["context"]
[processes.compaction]
roles = ["compaction"]
[processes.conversation]
roles = ["conversation"]
[processes.router]
roles = ["router"]

[destinations.voice]
description = "Realtime voice conversation."
kind = "realtime"
"""


def _load(tmp_path: Path, text: str):
    path = tmp_path / "edge.toml"
    path.write_text(BASE + text)
    return load_config(path)


def _error(tmp_path: Path, text: str) -> str:
    with pytest.raises(ConfigError) as caught:
        _load(tmp_path, text)
    return str(caught.value).replace(str(tmp_path) + "/", "")


def xrmq_command() -> list[str]:
    script = Path(sys.executable).parent / "xrmq"
    return [str(script)] if script.exists() else [sys.executable, "-m", "xrmq.actors.cli"]


def test_a_realtime_destination_decodes_with_its_session_options(tmp_path):
    pytest.importorskip("websockets")
    from xrmq.actors.edge.realtime_destination import (
        realtime_provider,
        realtime_settings,
        summary_limit_bytes,
    )
    from xrmq.actors.realtime.offline_provider import OfflineRealtimeProvider

    config = _load(
        tmp_path,
        """
[destinations.voice.realtime]
provider = "offline"
compress_at = 0.6
rollover_at = 0.8
max_context_tokens = 2000
max_audio_turns = 40
backlog_items = 250
overflow = "drop_newest"
policy = "natural"
keep_tail = 6
boundary_wait_s = 5.0
connect_latency_s = 1.1
""",
    )
    realtime = config.destinations["voice"].realtime
    assert realtime is not None and realtime.provider == "offline"
    settings = realtime_settings(realtime)
    assert (settings.pressure.compress_at, settings.pressure.rollover_at) == (0.6, 0.8)
    machine = settings.machine
    assert (machine.backlog_items, machine.overflow, machine.policy) == (
        250,
        "drop_newest",
        "natural",
    )
    assert (settings.keep_tail, settings.boundary_wait_s) == (6, 5.0)
    provider = realtime_provider(realtime)
    assert isinstance(provider, OfflineRealtimeProvider)
    assert provider.limits.max_context_tokens == 2000 and provider.limits.max_audio_turns == 40
    assert provider.server.faults.connect_latency_s == 1.1
    assert provider.server.settings.max_context_tokens == 2000
    assert summary_limit_bytes(provider.limits) == 2400  # 30 % of the window
    check_can_answer(config)
    assert write_config(config, tmp_path / "again.toml").destinations == config.destinations


def test_the_defaults_are_compress_at_070_and_rollover_at_085(tmp_path):
    config = _load(tmp_path, "")
    assert config.destinations["voice"].realtime is None
    defaults = RealtimeConfig()
    assert (defaults.compress_at, defaults.rollover_at) == (0.70, 0.85)
    assert (defaults.backlog_items, defaults.overflow, defaults.policy) == (
        500,
        "drop_oldest",
        "proactive",
    )


def test_an_openai_destination_takes_base_url_model_and_key_variable(tmp_path, monkeypatch):
    pytest.importorskip("websockets")
    from xrmq.actors.edge.realtime_destination import realtime_provider
    from xrmq.actors.realtime.openai_realtime import OpenAIRealtime

    text = """
[destinations.voice.realtime]
provider = "openai"
base_url = "wss://lab.openai.azure.com/openai/realtime?api-version=2025-04-01&deployment=rt"
model = "gpt-realtime-mini"
api_key_env = "LAB_REALTIME_KEY"
auth_header = "api-key"
"""
    monkeypatch.delenv("LAB_REALTIME_KEY", raising=False)
    config = _load(tmp_path, text)
    with pytest.raises(ConfigError) as caught:
        check_can_answer(config)
    assert str(caught.value).endswith(
        "destinations.voice.realtime.api_key_env: environment variable LAB_REALTIME_KEY is not set"
    )
    monkeypatch.setenv("LAB_REALTIME_KEY", "secret")
    check_can_answer(config)
    assert config.destinations["voice"].realtime is not None
    provider = realtime_provider(config.destinations["voice"].realtime)
    assert isinstance(provider, OpenAIRealtime)
    assert provider.url.endswith("deployment=rt") and provider.model == "gpt-realtime-mini"
    assert provider._headers()["api-key"] == "secret"
    assert provider.limits.max_context_tokens == 32_000  # the provider's declared window


@pytest.mark.parametrize(
    ("table", "message"),
    [
        (
            'provider = "gemini"',
            "destinations.voice.realtime.provider: must be one of 'offline', 'openai', "
            "got 'gemini'",
        ),
        ("compress_at = 0", "destinations.voice.realtime.compress_at: must be > 0"),
        ("rollover_at = 1.5", "destinations.voice.realtime.rollover_at: must be <= 1"),
        (
            "compress_at = 0.9",
            "destinations.voice.realtime.compress_at: must be <= rollover_at (0.85)",
        ),
        ("backlog_items = 0", "destinations.voice.realtime.backlog_items: must be >= 1"),
        (
            'overflow = "block"',
            "destinations.voice.realtime.overflow: must be one of 'drop_oldest', "
            "'drop_newest', got 'block'",
        ),
        (
            'policy = "sometimes"',
            "destinations.voice.realtime.policy: must be one of 'proactive', 'natural'",
        ),
        ("max_context_tokens = 0", "destinations.voice.realtime.max_context_tokens: must be >= 1"),
        ("boundary_wait_s = 0", "destinations.voice.realtime.boundary_wait_s: must be > 0"),
        (
            'base_url = "wss://example.com"',
            'destinations.voice.realtime.base_url: only for provider = "openai"',
        ),
        (
            'api_key_env = "KEY"',
            'destinations.voice.realtime.api_key_env: only for provider = "openai"',
        ),
        (
            'provider = "openai"\nbase_url = "https://api.openai.com"',
            "destinations.voice.realtime.base_url: must be a ws:// or wss:// URL",
        ),
        (
            'provider = "openai"\nconnect_latency_s = 1.0',
            'destinations.voice.realtime.connect_latency_s: only for provider = "offline"',
        ),
        (
            'provider = "openai"\nauth_header = "x-key"',
            "destinations.voice.realtime.auth_header: must be one of 'authorization', 'api-key'",
        ),
        ("rollover = 0.8", "destinations.voice.realtime.rollover: unknown key"),
    ],
)
def test_a_bad_realtime_option_names_the_key_and_the_rule(tmp_path, table, message):
    assert message in _error(tmp_path, f"[destinations.voice.realtime]\n{table}\n")


def test_a_voice_role_beside_a_realtime_destination_is_refused(tmp_path):
    config = _load(tmp_path, '[processes.voice]\nroles = ["voice"]\n')
    with pytest.raises(ConfigError) as caught:
        check_can_answer(config)
    assert "processes.voice.roles[0]: the 'voice' role and the realtime destination" in str(
        caught.value
    )
    assert "answered twice" in str(caught.value)


def test_only_a_realtime_destination_has_a_realtime_table(tmp_path):
    text = BASE.replace('kind = "realtime"', 'kind = "conversation"')
    path = tmp_path / "edge.toml"
    path.write_text(text + "[destinations.voice.realtime]\nkeep_tail = 2\n")
    with pytest.raises(ConfigError) as caught:
        load_config(path)
    assert str(caught.value).endswith(
        'destinations.voice.realtime: only a kind = "realtime" destination has a realtime session'
    )


def _metrics(gauges: dict[str, float]) -> RuntimeMetrics:
    return RuntimeMetrics(
        runtime="conversation",
        epoch=1,
        pid=42,
        timestamp_us=0,
        published=0,
        delivered=0,
        gaps=0,
        stale=0,
        rejected=0,
        overflow=0,
        handler_errors=0,
        gauges=gauges,
    )


def test_top_shows_a_realtime_line_with_the_last_rollovers_phases():
    gauges = {
        "realtime.alice.pressure": 0.42,
        "realtime.alice.epoch": 3.0,
        "realtime.alice.rollovers": 2.0,
        "realtime.alice.backlog": 0.0,
        "realtime.alice.replayed": 40.0,
        "realtime.alice.stale_events": 1.0,
        "realtime.alice.rollover_boundary_wait_ms": 12.0,
        "realtime.alice.rollover_boundary_wait_p50_ms": 10.0,
        "realtime.alice.rollover_handshake_ms": 1100.0,
        "realtime.alice.rollover_handshake_p50_ms": 1105.0,
        "realtime.alice.rollover_replay_ms": 3.5,
        "realtime.alice.rollover_replay_p50_ms": 3.0,
        "realtime.alice.rollover_backlog": 40.0,
        "context.participants": 1.0,
    }
    view = TopView()
    view.observe(_metrics(gauges), received_at=1.0)
    text = render(view.rows(now=1.5), color=False)
    assert "  context.participants 1\n" in text  # other gauges keep their line
    assert (
        "  realtime alice: pressure 0.42  epoch 3  rollovers 2  backlog 0  replayed 40  "
        "stale drops 1\n" in text
    )
    assert (
        "    last rollover: boundary wait 12 ms (p50 10), handshake 1100 ms (p50 1105), "
        "replay 3.5 ms (p50 3), backlog replayed 40\n" in text
    )


@pytest.mark.timeout(120)
async def test_a_rollover_publishes_its_phase_durations_in_the_runtime_metrics():
    """A real rollover of a RealtimeConversation: the runtime's metrics carry each phase
    (last and median), the backlog replayed and the counters, and top renders them."""
    pytest.importorskip("websockets")
    from xrmq.actors.context import ContextManager
    from xrmq.actors.models import OfflineLLM
    from xrmq.actors.realtime.conversation import RealtimeConversation
    from xrmq.actors.realtime.openai_realtime import OpenAIRealtime
    from xrmq.actors.realtime.pressure import RealtimeLimits
    from xrmq.actors.realtime.server import Faults, OfflineRealtimeServer
    from xrmq.actors.realtime.session import SessionSettings
    from xrmq.actors.runtime import AgentRuntime
    from xrmq.actors.tools.summary import llm_summarizer
    from xrmq.schemas import AgentTurn
    from xrmq.topics import VOICE_OUTPUT_TOPIC

    llm = OfflineLLM(time_to_first_token_s=0, tokens_per_second=0)
    context = ContextManager(llm)
    runtime = AgentRuntime()
    faults = Faults()
    async with OfflineRealtimeServer(brain=ScriptedEars(), faults=faults) as server:
        provider = OpenAIRealtime(base_url=server.url, limits=RealtimeLimits())
        realtime = RealtimeConversation(
            provider,
            context=context,
            runtime=runtime,
            output_topic=VOICE_OUTPUT_TOPIC,
            summarize=llm_summarizer(llm, limit_bytes=300),
            settings=SessionSettings(keep_tail=2),
        )
        runtime.register("realtime", realtime)
        await runtime.start()

        async def started() -> None:
            return None

        async with asyncio.timeout(WAIT_S):
            await realtime.answer(AgentTurn("alice", "t1", "My badge is 4417."), started=started)
            session = realtime.participants["alice"].session
            await session.wait_for(lambda: not session.machine.boundary.playing)
            await session.request_rollover("test")
            await session.wait_streaming(2)
            await realtime.answer(AgentTurn("alice", "t2", "What is my badge?"), started=started)
        metrics = runtime.metrics()
        await realtime.close()
        await runtime.stop()
    await context.close()
    gauges = metrics.gauges
    for phase in ("boundary_wait", "checkpoint", "handshake", "connect", "replay"):
        assert gauges[f"realtime.alice.rollover_{phase}_ms"] >= 0
        assert f"realtime.alice.rollover_{phase}_p50_ms" in gauges
    assert gauges["realtime.alice.rollovers"] == 1 and gauges["realtime.alice.epoch"] == 2
    assert gauges["realtime.alice.stale_events"] == 0
    assert "realtime.alice.pressure" in gauges and "realtime.alice.replayed" in gauges
    view = TopView()
    view.observe(metrics, received_at=1.0)
    text = render(view.rows(now=1.0), color=False)
    assert "  realtime alice: pressure " in text and "rollovers 1" in text
    assert "    last rollover: boundary wait " in text and " handshake " in text


def _demo_env(tmp_path: Path, **extra: str) -> dict[str, str]:
    return {**os.environ, "TMPDIR": str(tmp_path), "XRMQ_RUNTIME_DIR": str(tmp_path), **extra}


@pytest.mark.timeout(300)
def test_demo_realtime_rolls_over_and_recalls_the_first_fact(tmp_path):
    from xrmq.actors.edge.realtime_demo import EXPECTED, FIRST_FACT, QUESTION, missing_requirements

    missing = missing_requirements()
    if missing:
        pytest.skip("; ".join(missing))
    result = subprocess.run(
        [*xrmq_command(), "demo", "--realtime"],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        env=_demo_env(tmp_path),
        timeout=280,
    )
    output = result.stdout
    assert result.returncode == 0, output + result.stderr[-3000:]
    lines = output.splitlines()
    assert lines[1] == f"[alice] said: {FIRST_FACT}"
    rolled = next(i for i, line in enumerate(lines) if line.startswith("  rolled over to epoch"))
    assert " handshake " in lines[rolled] and " replay " in lines[rolled]
    assert lines[rolled + 1] == f"[alice] said: {QUESTION}"
    assert EXPECTED in lines[rolled + 2].lower()  # recalled after the rollover
    assert lines[-1] == "xrmq demo --realtime: ok"
    assert processes_mentioning(str(tmp_path)) == []
    assert list(tmp_path.iterdir()) == []  # the stack's directory and the spoken WAVs are gone


def test_demo_realtime_names_what_to_install_when_it_is_missing(tmp_path):
    bare = str(Path(sys.executable).parent)  # no espeak-ng on this PATH
    result = subprocess.run(
        [*xrmq_command(), "demo", "--realtime"],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        env=_demo_env(tmp_path, PATH=bare),
        timeout=50,
    )
    assert result.returncode == 1, result.stdout + result.stderr
    assert result.stdout.startswith("xrmq demo --realtime: needs ")
    assert "espeak-ng (speech): apt-get install espeak-ng" in result.stdout
