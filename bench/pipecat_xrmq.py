"""The xrmq side of the Pipecat side-by-side: the voice demo's edge stack, its model the
paced server, and several participants speaking at once.

``xrmq_config(api_base)`` is ``voice_config()`` (the stack ``xrmq demo --voice`` runs:
Silero VAD and the bundled Whisper tiny.en in the ``voice`` process, Piper's
``en_US-joe-medium`` speaking onto ``audio.out``) with the answers' model pointed at the
paced server through litellm (``openai/paced``); compaction and routing keep the offline
model, so every request the server sees is an answer. ``run_xrmq`` speaks each question
for every participant at once (``xrmq mic``'s ``FrameSender``: 20 ms frames in real time)
and stamps, per participant, the transcript (the ``UserQuery``), the first reply chunk and
the first ``audio.out`` frame after it, from the end of the speech; with ``shares``, once
the replies played, each counted turn's own share of that wait from its ``TurnRecord``
(``voice_share``).
"""

from __future__ import annotations

import asyncio
import os
import time

import msgspec

from xrmq.actors.edge.config import EdgeConfig
from xrmq.actors.edge.private_stack import PrivateStack
from xrmq.actors.edge.voice_demo import voice_config
from xrmq.actors.models.config import parse_model_spec
from xrmq.actors.runtime import Agent, AgentRuntime, RuntimeContext, subscribe
from xrmq.actors.voice.mic import FrameSender
from xrmq.schemas import AudioFrame, ResponseOutput, TurnRecord, UserQuery
from xrmq.topics import AUDIO_OUT_TOPIC, QUERY_TOPIC, TURNS_TOPIC, VOICE_OUTPUT_TOPIC

from .voice_share import Share, own_share

KEY_VARIABLE = "XRMQ_BENCH_PACED_KEY"
"""The (meaningless) API key litellm sends the paced server, by the config's rule: keys
live in the environment, never in a config."""
RECORD_WAIT_S = 60.0
"""How long the side waits for its turns' records once the last turn was heard."""
PARTICIPANTS = ("alice", "bob", "carol", "dave", "erin", "frank", "grace", "heidi")


def xrmq_config(api_base: str) -> EdgeConfig:
    base = voice_config()
    paced = parse_model_spec(
        {"model": "openai/paced", "api_base": api_base, "api_key_env": KEY_VARIABLE}
    )
    models = msgspec.structs.replace(base.models, answers=paced)
    return msgspec.structs.replace(base, models=models)


class TurnProbe(Agent):
    """One participant's turn: the query, then the first reply chunk and audio frame after it."""

    def __init__(self) -> None:
        self.query_at = 0.0
        self.heard = ""
        self.chunk_at = 0.0
        self.audio_at = 0.0
        self.turn_id = ""
        self.records: dict[str, TurnRecord] = {}
        self.changed = asyncio.Event()

    def reset(self) -> None:
        self.query_at = self.chunk_at = self.audio_at = 0.0
        self.heard = ""

    @subscribe(QUERY_TOPIC)
    async def on_query(self, query: UserQuery, ctx: RuntimeContext) -> None:
        if not self.query_at:
            self.query_at, self.heard = time.time(), query.text
            self.turn_id = ctx.metadata.message_id
            self.changed.set()

    @subscribe(TURNS_TOPIC)
    async def on_record(self, record: TurnRecord, ctx: RuntimeContext) -> None:
        self.records[record.turn_id] = record
        self.changed.set()

    async def until_records(self, turn_ids: list[str], timeout_s: float) -> None:
        """Until the records of ``turn_ids`` arrived, or ``timeout_s`` passed."""
        deadline = time.monotonic() + timeout_s
        while not all(turn_id in self.records for turn_id in turn_ids):
            self.changed.clear()
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                return
            try:
                await asyncio.wait_for(self.changed.wait(), remaining)
            except TimeoutError:
                pass

    @subscribe(VOICE_OUTPUT_TOPIC)
    async def on_output(self, output: ResponseOutput, ctx: RuntimeContext) -> None:
        if self.query_at and not self.chunk_at and output.text:
            self.chunk_at = time.time()
            self.changed.set()

    @subscribe(AUDIO_OUT_TOPIC)
    async def on_audio(self, frame: AudioFrame, ctx: RuntimeContext) -> None:
        if self.query_at and not self.audio_at:
            self.audio_at = time.time()
            self.changed.set()

    async def until_audio(self, timeout_s: float) -> None:
        deadline = time.monotonic() + timeout_s
        while not (self.chunk_at and self.audio_at):
            self.changed.clear()
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise TimeoutError(f"xrmq side: no reply audio within {timeout_s:.0f} s")
            try:
                await asyncio.wait_for(self.changed.wait(), remaining)
            except TimeoutError:
                pass


async def _say(
    runtime: AgentRuntime,
    probe: TurnProbe,
    participant: str,
    pcm: bytes,
    lead_s: float,
    speech_s: float,
    timeout_s: float,
) -> tuple[float, float, float, str, float]:
    probe.reset()
    started = time.time()
    sending = asyncio.ensure_future(FrameSender(runtime, participant).send(pcm))
    end = started + lead_s + speech_s
    await probe.until_audio(timeout_s)
    await sending
    return (
        probe.query_at - end,
        probe.chunk_at - end,
        probe.audio_at - end,
        probe.heard,
        probe.query_at,
    )


async def run_xrmq(
    api_base: str,
    speakers: int,
    questions: list[tuple[bytes, float]],
    *,
    lead_s: float,
    warm_up: bool = True,
    timeout_s: float = 60.0,
    shares: list[Share | None] | None = None,
) -> list[tuple[float, float, float, str, float]]:
    """Every participant says every question (after a warm-up, not counted, with
    ``warm_up``), all at once; per counted turn (to transcript, to first chunk, to first
    audio, the transcript, the query's ``time.time()``). ``shares`` gets each counted
    turn's own share (None: its record did not come, or lacked a stamp)."""
    if speakers > len(PARTICIPANTS):
        raise ValueError(f"run_xrmq.speakers: at most {len(PARTICIPANTS)}")
    os.environ.setdefault(KEY_VARIABLE, "paced")
    names = PARTICIPANTS[:speakers]
    figures: list[tuple[float, float, float, str, float]] = []
    async with PrivateStack(xrmq_config(api_base)) as stack:
        runtime = AgentRuntime(stack.bus, name="pipecat-bench")
        probes = [
            runtime.register(f"probe-{name}", TurnProbe(), participant_id=name) for name in names
        ]
        await runtime.start()
        counted: list[tuple[TurnProbe, str]] = []
        try:
            warm = [questions[0]] if warm_up else []
            for index, (pcm, speech_s) in enumerate([*warm, *questions]):
                said = await asyncio.gather(
                    *(
                        _say(runtime, probe, name, pcm, lead_s, speech_s, timeout_s)
                        for probe, name in zip(probes, names)
                    )
                )
                if index >= len(warm):
                    figures.extend(said)
                    counted += [(probe, probe.turn_id) for probe in probes]
            if shares is not None:
                for probe in probes:
                    ids = [turn_id for owner, turn_id in counted if owner is probe]
                    await probe.until_records(ids, RECORD_WAIT_S)
                for probe, turn_id in counted:
                    record = probe.records.get(turn_id)
                    shares.append(None if record is None else own_share(record))
        finally:
            await runtime.stop()
    return figures
