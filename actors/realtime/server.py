"""The offline simulated realtime server: the OpenAI Realtime protocol on loopback.

What the demo and the tests talk to instead of a remote provider (which cannot exist
here): JSON events over websockets, the same event names and order as the real service
(see ``openai_realtime.py``), with a ``Brain`` behind it: speech-to-text by the voice
front end's offline STT (``WhisperSTT``), answers by ``OfflineLLM`` from the session's
instructions and conversation items, speech by espeak-ng. Turn detection is the
server's (``server_vad``: an energy detector with a trailing silence) or the client's
(``turn_detection: null``, then ``input_audio_buffer.commit`` + ``response.create``).
Each response's assistant item is announced (``response.output_item.added``) and a
``conversation.item.truncate`` cuts it to the words of the audio heard (``heard_part``),
so the conversation the next answer comes from holds only what the participant heard.

Limits (``ServerSettings``), enforced as providers do: over ``max_context_tokens`` the
oldest items are truncated away (counted ``truncated_items``: the context loss rollover
exists to prevent); over ``max_turns`` or ``max_audio_s`` the session gets an ``error``
and is closed (``limit_closes``); a session over ``max_concurrent_sessions`` open at once
gets an ``error`` (``session_limit``) instead of ``session.created`` and is closed
(``concurrency_refused``); one that receives nothing for ``idle_timeout_s`` while no
response runs gets an ``error`` (``session_idle_timeout``) and is closed
(``idle_closes``). None: no such limit. Usage in ``response.done`` is the response's input
(instructions + every item) and output tokens, estimated at four characters a token.

Fault injection (``Faults``, mutable while running): ``connect_latency_s`` before
``session.created``; ``ready_delay_s`` before ``session.updated`` (slow ready);
``refuse_connects`` (the next N handshakes answered 503); ``drop_mid_response`` (the
next N responses lose the connection after their first audio delta);
``late_events`` (every ``response.done`` is followed by a duplicate ``response.done``
and an ``error``, as an old session's late terminal events would be); ``hold`` (an
``asyncio.Event``: new sessions wait for it); ``drop_session(number)`` loses the
connection of session ``number`` (1, 2, ... in connection order) at once.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import itertools
import json
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from http import HTTPStatus
from typing import Any, Protocol

import numpy as np
from websockets.asyncio.server import Server, ServerConnection, serve
from websockets.exceptions import ConnectionClosed
from websockets.http11 import Request, Response

from .checkpoint import heard_part
from .pressure import estimate_tokens

AUDIO_CHUNK_S = 0.2
PROMPT_CHARS = 400
"""How much of the session's instructions prompts the offline recognizer."""
"""Seconds of response audio per ``response.audio.delta``."""


class Brain(Protocol):
    """What the server hears, answers and says."""

    async def transcribe(self, pcm: bytes, sample_rate: int, prompt: str = "") -> str: ...

    async def answer(self, instructions: str, items: Sequence[tuple[str, str]]) -> str: ...

    async def speak(self, text: str, sample_rate: int) -> bytes: ...


class OfflineBrain:
    """WhisperSTT, OfflineLLM and espeak-ng (each made when first needed)."""

    def __init__(self, *, stt: Any = None, llm: Any = None, synthesizer: Any = None) -> None:
        self._stt, self._llm, self._synthesizer = stt, llm, synthesizer

    async def transcribe(self, pcm: bytes, sample_rate: int, prompt: str = "") -> str:
        """Whisper, prompted with the end of the session's instructions (names, numbers)."""
        from xrmq.actors.voice.pcm import SAMPLE_RATE, pcm16_to_float, resample

        if self._stt is None:
            from xrmq.actors.voice.stt import WhisperSTT

            self._stt = WhisperSTT()
        audio = resample(pcm16_to_float(pcm), sample_rate, SAMPLE_RATE)
        return str(await self._stt.transcribe(audio, prompt[-PROMPT_CHARS:] or None))

    async def answer(self, instructions: str, items: Sequence[tuple[str, str]]) -> str:
        from xrmq.actors.models import ChatMessage, ChatOptions, OfflineLLM

        if self._llm is None:
            self._llm = OfflineLLM(time_to_first_token_s=0, tokens_per_second=0)
        history = "\n".join(f"{role.capitalize()}: {text}" for role, text in items[:-1])
        context = "\n\n".join(part for part in (instructions, history) if part.strip())
        messages = [
            ChatMessage("system", "You are a realtime voice assistant."),
            ChatMessage("user", context or "(no context)"),
            ChatMessage("user", items[-1][1] if items else ""),
        ]
        completion = await self._llm.complete(messages, ChatOptions())
        return str(completion.text).strip()

    async def speak(self, text: str, sample_rate: int) -> bytes:
        from xrmq.actors.voice.audio_sink import EspeakSynthesizer
        from xrmq.actors.voice.pcm import float_to_pcm16, resample

        if self._synthesizer is None:
            self._synthesizer = EspeakSynthesizer()
        samples, rate = await self._synthesizer.synthesize(text)
        return float_to_pcm16(resample(samples, rate, sample_rate))


@dataclass
class ServerSettings:
    sample_rate: int = 24_000
    max_context_tokens: int | None = None
    max_turns: int | None = None
    max_audio_s: float | None = None
    vad_threshold: int = 500
    """Mean absolute sample value above which a 20 ms chunk is speech (server VAD)."""
    max_concurrent_sessions: int | None = None
    """Sessions open at once (a rollover's standby is a second one); None: no limit."""
    idle_timeout_s: float | None = None
    """A session that receives nothing this long (no response running) is closed."""


@dataclass
class Faults:
    connect_latency_s: float = 0.0
    ready_delay_s: float = 0.0
    refuse_connects: int = 0
    drop_mid_response: int = 0
    late_events: bool = False
    hold: asyncio.Event | None = None
    """While set to an unset event, new sessions wait before ``session.created`` (a
    connect held open for as long as a test needs, without a clock)."""


@dataclass
class _Session:
    number: int
    instructions: str = ""
    server_vad: bool = False
    silence_s: float = 0.4
    create_response: bool = True
    items: list[tuple[str, str]] = field(default_factory=list)
    item_ids: list[str] = field(default_factory=list)
    """The id of each of ``items`` (same order)."""
    item_audio_ms: dict[str, float] = field(default_factory=dict)
    """Milliseconds of speech of each assistant item (what a truncate cuts)."""
    buffer: bytearray = field(default_factory=bytearray)
    turns: int = 0
    audio_s: float = 0.0
    speaking: bool = False
    quiet_s: float = 0.0
    response: asyncio.Task[None] | None = None


class OfflineRealtimeServer:
    """``async with OfflineRealtimeServer() as server:`` serves ``server.url`` on loopback."""

    def __init__(
        self,
        settings: ServerSettings | None = None,
        *,
        brain: Brain | None = None,
        faults: Faults | None = None,
    ) -> None:
        self.settings = ServerSettings() if settings is None else settings
        self.brain: Brain = OfflineBrain() if brain is None else brain
        self.faults = Faults() if faults is None else faults
        self.stats: Counter[str] = Counter()
        self.instructions: list[str] = []
        """Every session's instructions, in connection order (what each session was seeded with)."""
        self.seeded_items: list[list[tuple[str, str]]] = []
        self.truncations: list[tuple[str, int, str]] = []
        """Every honoured ``conversation.item.truncate``: item id, audio_end_ms, text kept."""
        self._server: Server | None = None
        self._numbers = itertools.count(1)
        self._ids = itertools.count(1)
        self._handlers: set[asyncio.Task[Any]] = set()
        self.open_sessions = 0
        self._sockets: dict[int, ServerConnection] = {}

    @property
    def url(self) -> str:
        if self._server is None:
            raise RuntimeError("OfflineRealtimeServer: not started")
        port = self._server.sockets[0].getsockname()[1]
        return f"ws://127.0.0.1:{port}/v1/realtime"

    async def __aenter__(self) -> OfflineRealtimeServer:
        self._server = await serve(
            self._handle, "127.0.0.1", 0, process_request=self._admit, max_size=2**24
        )
        return self

    async def __aexit__(self, *exc: object) -> None:
        if self._server is not None:
            for task in list(self._handlers):  # a handler held in a fault's delay, say
                task.cancel()
            self._server.close()
            await self._server.wait_closed()
            self._server = None

    def _admit(self, connection: ServerConnection, request: Request) -> Response | None:
        if self.faults.refuse_connects > 0:
            self.faults.refuse_connects -= 1
            self.stats["refused"] += 1
            return connection.respond(HTTPStatus.SERVICE_UNAVAILABLE, "offline server: refused\n")
        return None

    def drop_session(self, number: int) -> bool:
        """Lose session ``number``'s connection (no close handshake); False if not open."""
        ws = self._sockets.get(number)
        if ws is None:
            return False
        self.stats["dropped_sessions"] += 1
        ws.transport.abort()
        return True

    def _id(self, prefix: str) -> str:
        return f"{prefix}_{next(self._ids):06d}"

    async def _handle(self, ws: ServerConnection) -> None:
        task = asyncio.current_task()
        if task is not None:
            self._handlers.add(task)
            task.add_done_callback(self._handlers.discard)
        limit = self.settings.max_concurrent_sessions
        if limit is not None and self.open_sessions >= limit:
            self.stats["concurrency_refused"] += 1
            await self._error(ws, "session_limit", f"more than {limit} sessions at once")
            await ws.close(1008, "session_limit")
            return
        self.open_sessions += 1
        try:
            await self._serve(ws)
        finally:
            self.open_sessions -= 1

    async def _serve(self, ws: ServerConnection) -> None:
        session = _Session(next(self._numbers))
        self.stats["sessions"] += 1
        self._sockets[session.number] = ws
        if self.faults.connect_latency_s > 0:
            await asyncio.sleep(self.faults.connect_latency_s)
        if self.faults.hold is not None:
            await self.faults.hold.wait()
        await self._send(ws, {"type": "session.created", "session": {"id": self._id("sess")}})
        self.instructions.append("")
        self.seeded_items.append([])
        try:
            while True:
                raw = await self._receive(ws, session)
                if raw is None:
                    break
                try:
                    event = json.loads(raw)
                except ValueError:
                    await self._error(ws, "invalid_json", "the event is not JSON")
                    continue
                if not isinstance(event, dict):
                    await self._error(ws, "invalid_event", "an event is a JSON object")
                    continue
                await self._dispatch(ws, session, event)
        except ConnectionClosed:
            pass  # the client went away (or a fault dropped it): the session ends
        finally:
            self._sockets.pop(session.number, None)
            if session.response is not None:
                session.response.cancel()
                with contextlib.suppress(BaseException):
                    await session.response

    async def _receive(self, ws: ServerConnection, session: _Session) -> str | bytes | None:
        """The client's next event; None once the session was closed for being idle."""
        idle = self.settings.idle_timeout_s
        while True:
            try:
                async with asyncio.timeout(idle):
                    return await ws.recv()
            except TimeoutError:
                if session.response is not None and not session.response.done():
                    continue  # the server is still answering: not idle
                self.stats["idle_closes"] += 1
                await self._close_for_limit(
                    ws, "session_idle_timeout", f"nothing received for {idle:g} s"
                )
                return None

    async def _dispatch(
        self, ws: ServerConnection, session: _Session, event: dict[str, Any]
    ) -> None:
        kind = event.get("type")
        if kind == "session.update":
            config = event.get("session") or {}
            session.instructions = str(config.get("instructions", session.instructions))
            self.instructions[session.number - 1] = session.instructions
            vad = config.get("turn_detection")
            session.server_vad = isinstance(vad, dict)
            if isinstance(vad, dict):
                session.silence_s = float(vad.get("silence_duration_ms", 400)) / 1000
                session.create_response = bool(vad.get("create_response", True))
            if self.faults.ready_delay_s > 0:
                await asyncio.sleep(self.faults.ready_delay_s)
            await self._send(ws, {"type": "session.updated", "session": config})
        elif kind == "conversation.item.create":
            item = event.get("item") or {}
            role = str(item.get("role", "user"))
            text = " ".join(
                str(part.get("text", ""))
                for part in item.get("content") or []
                if isinstance(part, dict)
            ).strip()
            item_id = self._id("item")
            session.items.append((role, text))
            session.item_ids.append(item_id)
            if session.response is None and not session.turns:
                self.seeded_items[session.number - 1].append((role, text))
            await self._send(
                ws,
                {"type": "conversation.item.created", "item": {"id": item_id, "role": role}},
            )
        elif kind == "input_audio_buffer.append":
            pcm = base64.b64decode(event.get("audio", ""))
            await self._append(ws, session, pcm)
        elif kind == "input_audio_buffer.commit":
            await self._commit(ws, session)
        elif kind == "input_audio_buffer.clear":
            session.buffer.clear()
            await self._send(ws, {"type": "input_audio_buffer.cleared"})
        elif kind == "response.create":
            await self._respond(ws, session)
        elif kind == "response.cancel":
            if session.response is not None:
                session.response.cancel()
        elif kind == "conversation.item.truncate":
            await self._truncate(ws, session, event)
        else:
            await self._error(ws, "unknown_event", f"unknown event type {kind!r}")

    async def _append(self, ws: ServerConnection, session: _Session, pcm: bytes) -> None:
        seconds = len(pcm) / 2 / self.settings.sample_rate
        session.audio_s += seconds
        self.stats["audio_frames"] += 1
        limit = self.settings.max_audio_s
        if limit is not None and session.audio_s > limit:
            await self._close_for_limit(
                ws, "session_audio_limit", f"more than {limit:g} s of audio"
            )
            return
        session.buffer += pcm
        if not session.server_vad or not pcm:
            return
        voiced = float(np.abs(np.frombuffer(pcm, dtype="<i2")).mean()) > self.settings.vad_threshold
        if voiced:
            session.quiet_s = 0.0
            if not session.speaking:
                session.speaking = True
                await self._send(ws, {"type": "input_audio_buffer.speech_started"})
        elif session.speaking:
            session.quiet_s += seconds
            if session.quiet_s >= session.silence_s:
                session.speaking = False
                await self._send(ws, {"type": "input_audio_buffer.speech_stopped"})
                await self._commit(ws, session)
                if session.create_response:
                    await self._respond(ws, session)

    async def _commit(self, ws: ServerConnection, session: _Session) -> None:
        if not session.buffer:
            await self._error(
                ws, "input_audio_buffer_commit_empty", "the input audio buffer is empty"
            )
            return
        pcm, session.buffer = bytes(session.buffer), bytearray()
        session.turns += 1
        limit = self.settings.max_turns
        if limit is not None and session.turns > limit:
            await self._close_for_limit(ws, "session_turn_limit", f"more than {limit} audio turns")
            return
        item_id = self._id("item")
        await self._send(ws, {"type": "input_audio_buffer.committed", "item_id": item_id})
        await self._send(
            ws, {"type": "conversation.item.created", "item": {"id": item_id, "role": "user"}}
        )
        transcript = (
            await self.brain.transcribe(pcm, self.settings.sample_rate, session.instructions)
        ).strip()
        session.items.append(("user", transcript))
        session.item_ids.append(item_id)
        await self._send(
            ws,
            {
                "type": "conversation.item.input_audio_transcription.completed",
                "item_id": item_id,
                "transcript": transcript,
            },
        )

    async def _respond(self, ws: ServerConnection, session: _Session) -> None:
        if session.response is not None and not session.response.done():
            await self._error(
                ws, "conversation_already_has_active_response", "a response is in progress"
            )
            return
        session.response = asyncio.create_task(self._response(ws, session))

    def _input_tokens(self, session: _Session) -> int:
        return estimate_tokens(session.instructions) + sum(
            estimate_tokens(f"{role}: {text}") for role, text in session.items
        )

    async def _response(self, ws: ServerConnection, session: _Session) -> None:
        response_id = self._id("resp")
        await self._send(
            ws,
            {"type": "response.created", "response": {"id": response_id, "status": "in_progress"}},
        )
        limit = self.settings.max_context_tokens
        while limit is not None and len(session.items) > 1 and self._input_tokens(session) > limit:
            session.items.pop(0)
            session.item_audio_ms.pop(session.item_ids.pop(0), None)
            self.stats["truncated_items"] += 1
        input_tokens = self._input_tokens(session)
        status = "completed"
        text = ""
        try:
            text = await self.brain.answer(session.instructions, session.items)
            pcm = await self.brain.speak(text, self.settings.sample_rate)
            item_id = self._id("item")
            session.items.append(("assistant", text))
            session.item_ids.append(item_id)
            session.item_audio_ms[item_id] = len(pcm) / 2 / self.settings.sample_rate * 1000
            await self._send(
                ws,
                {
                    "type": "response.output_item.added",
                    "response_id": response_id,
                    "output_index": 0,
                    "item": {"id": item_id, "type": "message", "role": "assistant"},
                },
            )
            chunk = int(AUDIO_CHUNK_S * self.settings.sample_rate) * 2
            pieces = [pcm[at : at + chunk] for at in range(0, len(pcm), chunk)] or [b""]
            words = text.split(" ")
            per_piece = max(1, -(-len(words) // len(pieces)))
            for index, piece in enumerate(pieces):
                await self._send(
                    ws,
                    {
                        "type": "response.audio.delta",
                        "response_id": response_id,
                        "delta": base64.b64encode(piece).decode("ascii"),
                    },
                )
                if index == 0 and self.faults.drop_mid_response > 0:
                    self.faults.drop_mid_response -= 1
                    self.stats["dropped_mid_response"] += 1
                    ws.transport.abort()
                    return
                part = " ".join(words[index * per_piece : (index + 1) * per_piece])
                if part:
                    delta = part if index == 0 else f" {part}"
                    await self._send(
                        ws,
                        {
                            "type": "response.audio_transcript.delta",
                            "response_id": response_id,
                            "delta": delta,
                        },
                    )
        except asyncio.CancelledError:
            status = "cancelled"
        await self._send(ws, {"type": "response.audio.done", "response_id": response_id})
        await self._send(
            ws,
            {
                "type": "response.audio_transcript.done",
                "response_id": response_id,
                "transcript": text,
            },
        )
        output_tokens = estimate_tokens(text)
        done = {
            "type": "response.done",
            "response": {
                "id": response_id,
                "status": status,
                "usage": {
                    "input_tokens": input_tokens,
                    "output_tokens": output_tokens,
                    "total_tokens": input_tokens + output_tokens,
                },
            },
        }
        self.stats["responses"] += 1
        await self._send(ws, done)
        if self.faults.late_events:
            await self._send(ws, done)
            await self._error(ws, "late_event", "a late terminal event of this session")

    async def _truncate(
        self, ws: ServerConnection, session: _Session, event: dict[str, Any]
    ) -> None:
        """``conversation.item.truncate``: keep of an assistant item only what was heard."""
        item_id, end = str(event.get("item_id", "")), event.get("audio_end_ms")
        if not isinstance(end, int) or end < 0:
            await self._error(ws, "invalid_value", "audio_end_ms must be an integer >= 0")
            return
        if item_id not in session.item_ids:
            await self._error(ws, "item_not_found", f"no item {item_id!r} in the conversation")
            return
        index = session.item_ids.index(item_id)
        role, text = session.items[index]
        audio_ms = session.item_audio_ms.get(item_id)
        if role != "assistant" or audio_ms is None:
            await self._error(ws, "invalid_item", "only an assistant audio item can be truncated")
            return
        if end > audio_ms:
            await self._error(
                ws, "invalid_value", f"audio_end_ms {end} is beyond the item's {audio_ms:.0f} ms"
            )
            return
        kept = heard_part(text, end, audio_ms)
        session.items[index] = (role, kept)
        session.item_audio_ms[item_id] = float(end)
        self.stats["client_truncations"] += 1
        self.truncations.append((item_id, end, kept))
        await self._send(
            ws,
            {
                "type": "conversation.item.truncated",
                "item_id": item_id,
                "content_index": 0,
                "audio_end_ms": end,
            },
        )

    async def _close_for_limit(self, ws: ServerConnection, code: str, message: str) -> None:
        self.stats["limit_closes"] += 1
        await self._error(ws, code, message)
        await ws.close(1008, code)

    async def _error(self, ws: ServerConnection, code: str, message: str) -> None:
        self.stats[f"error.{code}"] += 1
        await self._send(
            ws,
            {
                "type": "error",
                "error": {"type": "invalid_request_error", "code": code, "message": message},
            },
        )

    async def _send(self, ws: ServerConnection, event: dict[str, Any]) -> None:
        event.setdefault("event_id", self._id("event"))
        with contextlib.suppress(Exception):
            await ws.send(json.dumps(event))
