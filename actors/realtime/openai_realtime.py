"""The OpenAI Realtime protocol over websockets: ``OpenAIRealtime`` (a ``RealtimeProvider``).

JSON events over one websocket (the protocol's ``realtime=v1`` event names):
``session.update``, ``conversation.item.create``, ``input_audio_buffer.append`` /
``commit``, ``response.create`` / ``cancel``, ``conversation.item.truncate`` (barge-in:
the assistant item cut at the audio the participant heard) from the client;
``session.created`` / ``updated``, ``conversation.item.created``,
``input_audio_buffer.speech_started`` / ``speech_stopped`` / ``committed``,
``conversation.item.input_audio_transcription.completed``, ``response.created``,
``response.output_item.added``, ``conversation.item.truncated``, ``response.audio.delta``,
``response.audio_transcript.delta``, ``response.done`` (with ``usage``) and ``error``
from the server. GA names (``response.output_audio.delta``,
``response.output_audio_transcript.delta``) are read too.

Ready contract: ``connect`` sends ``session.update`` and one ``conversation.item.create``
per seeded item, and returns only after ``session.updated`` and a
``conversation.item.created`` for every seeded item arrived (an ``error`` before that, a
refused handshake or ``ready_timeout_s`` raise ``RealtimeConnectError``).

``base_url`` makes the adapter work with Azure OpenAI (``wss://RESOURCE.openai.azure.com/
openai/realtime?api-version=...&deployment=...``, ``auth_header="api-key"``) and any
compatible server (the offline server in ``server.py`` among them); ``model`` is added as
a query parameter unless the URL already names a ``deployment`` or ``model``.
"""

from __future__ import annotations

import asyncio
import base64
import json
import os
import time
from collections.abc import AsyncIterator
from typing import Any, Literal
from urllib.parse import urlencode, urlsplit

import websockets
from websockets.asyncio.client import ClientConnection
from websockets.asyncio.client import connect as ws_connect

from .checkpoint import Role
from .pressure import RealtimeLimits, usage_from_openai
from .provider import (
    AudioDelta,
    Disconnected,
    InputCommitted,
    InputTranscript,
    ItemTruncated,
    OutputItem,
    ProviderError,
    RealtimeConnectError,
    RealtimeEvent,
    ResponseDone,
    ResponseStarted,
    SessionSeed,
    SpeechStarted,
    SpeechStopped,
    TranscriptDelta,
)

DEFAULT_BASE_URL = "wss://api.openai.com/v1/realtime"
DEFAULT_LIMITS = RealtimeLimits(max_context_tokens=32_000, max_session_s=30 * 60)
"""gpt-realtime's context window and session lifetime as documented in 2025-2026."""


def session_update(
    seed: SessionSeed, *, voice: str, transcription_model: str | None, silence_ms: int
) -> dict[str, Any]:
    """The ``session.update`` event that opens a session from ``seed``."""
    session: dict[str, Any] = {
        "modalities": ["audio", "text"],
        "instructions": seed.instructions,
        "voice": voice,
        "input_audio_format": "pcm16",
        "output_audio_format": "pcm16",
        "turn_detection": (
            {"type": "server_vad", "silence_duration_ms": silence_ms, "create_response": True}
            if seed.server_vad
            else None
        ),
    }
    if transcription_model:
        session["input_audio_transcription"] = {"model": transcription_model}
    return {"type": "session.update", "session": session}


def item_create(role: str, text: str) -> dict[str, Any]:
    """A ``conversation.item.create`` of one text message."""
    kind = "input_text" if role == "user" else "text"
    return {
        "type": "conversation.item.create",
        "item": {"type": "message", "role": role, "content": [{"type": kind, "text": text}]},
    }


def parse_event(event: dict[str, Any], texts: dict[str, list[str]]) -> RealtimeEvent | None:
    """One server event as a normalized ``RealtimeEvent`` (``None``: nothing to act on).

    ``texts`` collects each response's transcript deltas so ``ResponseDone`` carries the
    whole text even when the server's ``response.done`` omits it.
    """
    kind = event.get("type")
    if kind == "input_audio_buffer.speech_started":
        return SpeechStarted()
    if kind == "input_audio_buffer.speech_stopped":
        return SpeechStopped()
    if kind == "input_audio_buffer.committed":
        return InputCommitted(str(event.get("item_id", "")))
    if kind == "conversation.item.input_audio_transcription.completed":
        return InputTranscript(str(event.get("item_id", "")), str(event.get("transcript", "")))
    if kind == "response.created":
        response_id = str((event.get("response") or {}).get("id", ""))
        texts[response_id] = []
        return ResponseStarted(response_id)
    if kind == "response.output_item.added":
        item = event.get("item") or {}
        return OutputItem(str(event.get("response_id", "")), str(item.get("id", "")))
    if kind == "conversation.item.truncated":
        return ItemTruncated(str(event.get("item_id", "")), int(event.get("audio_end_ms", 0)))
    if kind in ("response.audio.delta", "response.output_audio.delta"):
        return AudioDelta(
            str(event.get("response_id", "")), base64.b64decode(event.get("delta", ""))
        )
    if kind in (
        "response.audio_transcript.delta",
        "response.output_audio_transcript.delta",
        "response.text.delta",
        "response.output_text.delta",
    ):
        response_id, delta = str(event.get("response_id", "")), str(event.get("delta", ""))
        texts.setdefault(response_id, []).append(delta)
        return TranscriptDelta(response_id, delta)
    if kind == "response.done":
        response = event.get("response") or {}
        response_id = str(response.get("id", ""))
        text = "".join(texts.pop(response_id, []))
        return ResponseDone(
            response_id,
            str(response.get("status", "completed")),
            text,
            usage_from_openai(response.get("usage")),
        )
    if kind == "error":
        error = event.get("error") or {}
        return ProviderError(
            str(error.get("code") or error.get("type") or "error"), str(error.get("message", ""))
        )
    return None


class OpenAIRealtimeConnection:
    """One acknowledged session on a websocket; see ``RealtimeConnection``."""

    def __init__(self, ws: ClientConnection) -> None:
        self._ws = ws
        self._texts: dict[str, list[str]] = {}
        self._closed_by_client = False

    async def _send(self, event: dict[str, Any]) -> None:
        await self._ws.send(json.dumps(event))

    async def append_audio(self, pcm: bytes) -> None:
        await self._send(
            {"type": "input_audio_buffer.append", "audio": base64.b64encode(pcm).decode("ascii")}
        )

    async def commit(self) -> None:
        await self._send({"type": "input_audio_buffer.commit"})

    async def send_text(self, text: str) -> None:
        await self._send(item_create("user", text))

    async def add_item(self, role: Role, text: str) -> None:
        await self._send(item_create(role, text))

    async def create_response(self) -> None:
        await self._send({"type": "response.create"})

    async def cancel_response(self) -> None:
        await self._send({"type": "response.cancel"})

    async def truncate(self, item_id: str, audio_end_ms: int) -> None:
        await self._send(
            {
                "type": "conversation.item.truncate",
                "item_id": item_id,
                "content_index": 0,
                "audio_end_ms": max(0, int(audio_end_ms)),
            }
        )

    async def events(self) -> AsyncIterator[RealtimeEvent]:
        """Normalized events until the socket closes, then one ``Disconnected``.

        Events the server sent before the close still arrive after ``close()`` was
        called; the caller tells them apart by the connection's epoch.
        """
        reason = "closed"
        try:
            async for raw in self._ws:
                try:
                    event = json.loads(raw)
                except ValueError:
                    continue
                if isinstance(event, dict):
                    parsed = parse_event(event, self._texts)
                    if parsed is not None:
                        yield parsed
        except websockets.ConnectionClosed as closed:
            reason = f"connection closed: {closed}"
        else:
            code = self._ws.close_code
            reason = f"closed ({code})" if code is not None else "closed"
        yield Disconnected(reason, self._closed_by_client)

    async def close(self) -> None:
        self._closed_by_client = True
        await self._ws.close()


class OpenAIRealtime:
    """A ``RealtimeProvider`` for the OpenAI Realtime protocol (and Azure, compatible servers).

    ``api_key`` (or the environment variable ``api_key_env``) is sent as ``Authorization:
    Bearer`` or, with ``auth_header="api-key"``, as Azure's ``api-key`` header; a server
    on loopback needs none. ``max_concurrent_sessions`` is 1 unless the account is known
    to allow more (a standby session before a rollover needs 2: not validated here
    against the remote service, so not assumed).
    """

    name = "openai"

    def __init__(
        self,
        *,
        model: str = "gpt-realtime",
        base_url: str = DEFAULT_BASE_URL,
        api_key: str | None = None,
        api_key_env: str = "OPENAI_API_KEY",
        auth_header: Literal["authorization", "api-key"] = "authorization",
        voice: str = "alloy",
        transcription_model: str | None = "whisper-1",
        silence_ms: int = 400,
        limits: RealtimeLimits = DEFAULT_LIMITS,
        proactive_rollover: bool = True,
        ready_timeout_s: float = 10.0,
        sample_rate: int = 24_000,
        max_concurrent_sessions: int = 1,
        standby_idle_s: float | None = None,
    ) -> None:
        scheme = urlsplit(base_url).scheme
        if scheme not in ("ws", "wss"):
            raise ValueError(
                f"OpenAIRealtime.base_url: must be a ws:// or wss:// URL, got {base_url!r}"
            )
        if not ready_timeout_s > 0:
            raise ValueError("OpenAIRealtime.ready_timeout_s: must be positive")
        if max_concurrent_sessions < 1:
            raise ValueError("OpenAIRealtime.max_concurrent_sessions: must be >= 1")
        if standby_idle_s is not None and not standby_idle_s > 0:
            raise ValueError("OpenAIRealtime.standby_idle_s: must be positive or None")
        if auth_header not in ("authorization", "api-key"):
            raise ValueError("OpenAIRealtime.auth_header: must be 'authorization' or 'api-key'")
        self.model = model
        self.base_url = base_url
        self.api_key = api_key if api_key is not None else os.environ.get(api_key_env)
        self.auth_header = auth_header
        self.voice = voice
        self.transcription_model = transcription_model
        self.silence_ms = silence_ms
        self.limits = limits
        self.proactive_rollover = proactive_rollover
        self.ready_timeout_s = ready_timeout_s
        self.sample_rate = sample_rate
        self.max_concurrent_sessions = max_concurrent_sessions
        self.standby_idle_s = standby_idle_s
        self.last_connect_s: float | None = None
        """How long the latest successful ``connect`` took, to the ready acknowledgement."""

    @property
    def url(self) -> str:
        query = urlsplit(self.base_url).query
        if "deployment=" in query or "model=" in query:
            return self.base_url
        joiner = "&" if query else "?"
        return f"{self.base_url}{joiner}{urlencode({'model': self.model})}"

    def _headers(self) -> dict[str, str]:
        headers = {"OpenAI-Beta": "realtime=v1"}
        if self.api_key:
            if self.auth_header == "api-key":
                headers["api-key"] = self.api_key
            else:
                headers["Authorization"] = f"Bearer {self.api_key}"
        return headers

    async def connect(self, seed: SessionSeed) -> OpenAIRealtimeConnection:
        started = time.monotonic()
        try:
            async with asyncio.timeout(self.ready_timeout_s):
                ws = await ws_connect(
                    self.url, additional_headers=self._headers(), max_size=2**24, open_timeout=None
                )
                try:
                    await self._handshake(ws, seed)
                except BaseException:
                    await ws.close()
                    raise
        except TimeoutError as error:
            raise RealtimeConnectError(
                f"{self.name}: no ready acknowledgement within {self.ready_timeout_s:g} s"
            ) from error
        except (OSError, websockets.InvalidHandshake, websockets.ConnectionClosed) as error:
            raise RealtimeConnectError(
                f"{self.name}: cannot connect to {self.url}: {error}"
            ) from error
        self.last_connect_s = time.monotonic() - started
        return OpenAIRealtimeConnection(ws)

    async def _handshake(self, ws: ClientConnection, seed: SessionSeed) -> None:
        await ws.send(
            json.dumps(
                session_update(
                    seed,
                    voice=self.voice,
                    transcription_model=self.transcription_model,
                    silence_ms=self.silence_ms,
                )
            )
        )
        for item in seed.items:
            await ws.send(json.dumps(item_create(item.role, item.text)))
        updated, created = False, 0
        while not (updated and created >= len(seed.items)):
            event = json.loads(await ws.recv())
            kind = event.get("type") if isinstance(event, dict) else None
            if kind == "session.updated":
                updated = True
            elif kind == "conversation.item.created":
                created += 1
            elif kind == "error":
                error = event.get("error") or {}
                raise RealtimeConnectError(
                    f"{self.name}: session refused: {error.get('code')}: {error.get('message')}"
                )
