"""A ``kind = "realtime"`` destination of the edge config, built for the conversation role.

``realtime_settings`` turns ``[destinations.NAME.realtime]`` (``RealtimeConfig``, checked
when the config was decoded) into the session's ``SessionSettings``;
``realtime_provider`` into its provider (``offline``: an ``OfflineRealtimeProvider``,
the offline server inside this process; ``openai``: ``OpenAIRealtime`` at
``base_url``); ``build_realtime`` registers the ``RealtimeConversation`` (on
``audio.in``, ``audio.playback``, ``participant.left``); the conversation role serves it
to the router under the destination's name. Its checkpoints are summarized by the compaction workers
(a ``WorkerSummarizer`` of its own, like a tools destination's transcripts, with
``SUMMARY_SHARE`` of the session's token window as its budget). Imported only when a
config has a realtime destination: it needs the ``realtime`` extra (and, for the offline
server, the ``voice`` extra's speech-to-text).
"""

from __future__ import annotations

from typing import Any

from xrmq.actors.context import ContextManager
from xrmq.actors.context.plan import ContextPlan
from xrmq.actors.realtime.config import RealtimeConfig
from xrmq.actors.realtime.conversation import RealtimeConversation
from xrmq.actors.realtime.openai_realtime import DEFAULT_BASE_URL, DEFAULT_LIMITS, OpenAIRealtime
from xrmq.actors.realtime.pressure import CHARS_PER_TOKEN, PressurePolicy, RealtimeLimits
from xrmq.actors.realtime.provider import RealtimeProvider
from xrmq.actors.realtime.rollover import MachineSettings
from xrmq.actors.realtime.server import Faults, ServerSettings
from xrmq.actors.realtime.session import SessionSettings
from xrmq.actors.runtime import AgentRuntime
from xrmq.actors.tools.summary import SUMMARY_LIMIT_BYTES
from xrmq.actors.tools.workers import WorkerSummarizer
from xrmq.schemas import RoutingAid
from xrmq.topics import VOICE_OUTPUT_TOPIC

from .config import DestinationConfig


def realtime_settings(realtime: RealtimeConfig) -> SessionSettings:
    """The session settings ``[destinations.NAME.realtime]`` describes."""
    return SessionSettings(
        machine=MachineSettings(
            policy=realtime.policy,
            backlog_items=realtime.backlog_items,
            overflow=realtime.overflow,
            connect_attempts=realtime.connect_attempts,
        ),
        pressure=PressurePolicy(
            compress_at=realtime.compress_at,
            rollover_at=realtime.rollover_at,
            prepare_at=realtime.prepare_at,
        ),
        keep_tail=realtime.keep_tail,
        boundary_wait_s=realtime.boundary_wait_s,
    )


def realtime_limits(realtime: RealtimeConfig) -> RealtimeLimits:
    """The limits pressure is measured against: the configured ones over the provider's."""
    base = DEFAULT_LIMITS if realtime.provider == "openai" else RealtimeLimits()
    return RealtimeLimits(
        max_context_tokens=realtime.max_context_tokens or base.max_context_tokens,
        max_audio_turns=realtime.max_audio_turns or base.max_audio_turns,
        max_audio_duration_s=realtime.max_audio_duration_s or base.max_audio_duration_s,
        max_session_s=realtime.max_session_s or base.max_session_s,
    )


SUMMARY_SHARE = 0.3
"""Of a session's token window, what its checkpoint summary may take (the rest: the
instructions, the verbatim tail and the conversation after the rollover)."""


def summary_limit_bytes(limits: RealtimeLimits) -> int:
    """The checkpoint summary's budget: ``SUMMARY_SHARE`` of the token window, in bytes."""
    if limits.max_context_tokens is None:
        return SUMMARY_LIMIT_BYTES
    return max(120, int(limits.max_context_tokens * SUMMARY_SHARE * CHARS_PER_TOKEN))


def realtime_provider(realtime: RealtimeConfig) -> RealtimeProvider:
    limits = realtime_limits(realtime)
    if realtime.provider == "offline":
        from xrmq.actors.realtime.offline_provider import OfflineRealtimeProvider

        window = realtime.server_max_context_tokens or realtime.max_context_tokens
        return OfflineRealtimeProvider(
            limits=limits,
            server=ServerSettings(
                max_context_tokens=window,
                max_concurrent_sessions=realtime.max_concurrent_sessions,
                idle_timeout_s=realtime.idle_s,
            ),
            faults=Faults(connect_latency_s=realtime.connect_latency_s),
        )
    auth: Any = realtime.auth_header
    options: dict[str, Any] = {}
    if realtime.api_key_env is not None:
        options["api_key_env"] = realtime.api_key_env
    return OpenAIRealtime(
        model=realtime.model,
        base_url=realtime.base_url or DEFAULT_BASE_URL,
        auth_header=auth,
        voice=realtime.voice,
        limits=limits,
        max_concurrent_sessions=realtime.max_concurrent_sessions or 1,
        standby_idle_s=realtime.idle_s,
        **options,
    )


def build_realtime(
    runtime: AgentRuntime,
    name: str,
    destination: DestinationConfig,
    *,
    context: ContextManager,
    plan: ContextPlan,
) -> RealtimeConversation:
    """Register destination ``name``'s ``RealtimeConversation`` and its summarizer on the
    compaction workers (its own, with a budget from the session's window); the caller
    serves it to the router."""
    realtime = destination.realtime or RealtimeConfig()
    provider = realtime_provider(realtime)
    summarize = runtime.register(
        f"{name}-summarizer",
        WorkerSummarizer(plan, limit_bytes=summary_limit_bytes(provider.limits), sections=()),
    )
    agent = RealtimeConversation(
        provider,
        context=context,
        runtime=runtime,
        output_topic=VOICE_OUTPUT_TOPIC,
        instructions=destination.instructions,
        system_prompt=destination.system_prompt,
        summarize=summarize,
        settings=realtime_settings(realtime),
        routing=RoutingAid(destination.description, keywords=tuple(destination.keywords)),
        route=name,
    )
    runtime.register(f"{name}-realtime", agent)
    return agent
