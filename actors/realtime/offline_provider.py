"""``OfflineRealtimeProvider``: the offline realtime server as a provider of its own.

What a ``kind = "realtime"`` destination with ``provider = "offline"`` talks to: an
``OfflineRealtimeServer`` started inside the destination's process on loopback (port
from the OS) the first time a session is opened, reached through the real protocol
adapter (``OpenAIRealtime``), so the edge box and ``xrmq demo --realtime`` exercise the
same client code a remote provider gets. Its ``max_concurrent_sessions`` and
``standby_idle_s`` are the server's own limits (no limit: 2 sessions at once, so a
standby can be opened before a rollover). Started lazily because a role is built before
its runtime's event loop runs; ``aclose()`` stops the server.
"""

from __future__ import annotations

import asyncio

from .openai_realtime import OpenAIRealtime, OpenAIRealtimeConnection
from .pressure import RealtimeLimits
from .provider import SessionSeed
from .server import Faults, OfflineRealtimeServer, ServerSettings


class OfflineRealtimeProvider:
    """A ``RealtimeProvider`` over an in-process ``OfflineRealtimeServer``."""

    name = "offline"
    proactive_rollover = True

    def __init__(
        self,
        *,
        limits: RealtimeLimits,
        server: ServerSettings | None = None,
        faults: Faults | None = None,
        silence_ms: int = 400,
    ) -> None:
        self.limits = limits
        self.server = OfflineRealtimeServer(server, faults=faults)
        self.sample_rate = self.server.settings.sample_rate
        settings = self.server.settings
        self.max_concurrent_sessions = settings.max_concurrent_sessions or 2
        self.standby_idle_s = settings.idle_timeout_s
        self._silence_ms = silence_ms
        self._adapter: OpenAIRealtime | None = None
        self._starting = asyncio.Lock()

    async def connect(self, seed: SessionSeed) -> OpenAIRealtimeConnection:
        async with self._starting:
            if self._adapter is None:
                await self.server.__aenter__()
                self._adapter = OpenAIRealtime(
                    base_url=self.server.url,
                    limits=self.limits,
                    silence_ms=self._silence_ms,
                    sample_rate=self.sample_rate,
                    api_key="",
                    max_concurrent_sessions=self.max_concurrent_sessions,
                    standby_idle_s=self.standby_idle_s,
                )
        return await self._adapter.connect(seed)

    async def aclose(self) -> None:
        async with self._starting:
            if self._adapter is not None:
                self._adapter = None
                await self.server.__aexit__(None, None, None)
