"""Voice suite, many speakers: 1, 4 and 8 participants speaking at once to one box.

Each mode starts ``voice_config()``'s edge stack (OS processes, a real bus) with one
recognizer setting: ``padded`` (faster-whisper's 30 s window, no incremental decoding:
the recognizer before ``whisper_fit``), ``padded+incremental``, ``fitted`` (the default)
and ``fitted+incremental`` (``incremental_step_s = 1``). In each round every speaker
sends an espeak-ng question at once, a 20 ms frame each every 20 ms as microphones do,
and for each turn the suite takes, from the end of speech (the ``UserQuery``'s
``speech_end_us``: the VAD's end of the last voiced chunk, on the frames' clock): the
transcript (``transcribed_us``), the first reply chunk and the first ``audio.out`` frame
for that participant (seen on the bus by this process). CPU per turn per process is each
stack process's user+system time over the round (``/proc``), divided by the turns. Once
every reply played, each turn's ``TurnRecord`` gives xrmq's own share of the wait for the
first audio frame (``voice_share``: the stamps of the silence, recognition, model and
synthesis the turn actually had).
"""

from __future__ import annotations

import asyncio
import os
import tempfile
import time
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Any

from .voice_share import Share, own_share

MODES = {
    "padded": (False, 0.0),
    "padded+incremental": (False, 1.0),
    "fitted": (True, 0.0),
    "fitted+incremental": (True, 1.0),
}
"""mode -> (``whisper_fit``, ``incremental_step_s``)."""
SPEAKERS = (1, 4, 8)
RECORD_WAIT_S = 120.0
"""How long a round waits for its turns' records (their replies play out first)."""
_TICK = os.sysconf("SC_CLK_TCK")


@dataclass
class Round:
    speakers: int
    to_text: list[float] = field(default_factory=list)
    to_chunk: list[float] = field(default_factory=list)
    to_audio: list[float] = field(default_factory=list)
    cpu_per_turn: dict[str, float] = field(default_factory=dict)
    """process label -> CPU seconds per turn."""
    shares: list[Share] = field(default_factory=list)
    """Each turn's own share, of the turns whose record had every stamp it needs."""
    unshared: int = 0
    """Turns without a share (no record in time, or a stamp missing)."""


def _cpu_s(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / _TICK


def _config(fit: bool, step: float) -> Any:
    import msgspec

    from xrmq.actors.edge.voice_demo import voice_config

    config = voice_config()
    voice = msgspec.structs.replace(config.voice, whisper_fit=fit, incremental_step_s=step)
    return msgspec.structs.replace(config, voice=voice)


async def _rounds(fit: bool, step: float, speakers: tuple[int, ...]) -> list[Round]:
    import numpy as np

    from xrmq.actors.edge.private_stack import PrivateStack
    from xrmq.actors.edge.voice_demo import QUESTIONS, speak
    from xrmq.actors.runtime import Agent, AgentRuntime, RuntimeContext, subscribe
    from xrmq.actors.voice.mic import send_together
    from xrmq.actors.voice.pcm import float_to_pcm16, frames, read_wav, resample
    from xrmq.schemas import AudioFrame, ResponseOutput, TurnRecord, UserQuery
    from xrmq.topics import AUDIO_OUT_TOPIC, QUERY_TOPIC, TURNS_TOPIC, VOICE_OUTPUT_TOPIC

    class Watch(Agent):
        def __init__(self) -> None:
            self.queries: dict[str, UserQuery] = {}
            self.request: dict[str, str] = {}
            self.chunk_at: dict[str, float] = {}
            self.audio_at: dict[str, float] = {}
            self.query_id: dict[str, str] = {}
            self.records: dict[str, TurnRecord] = {}
            self.changed = asyncio.Event()

        @subscribe(QUERY_TOPIC)
        async def on_query(self, query: UserQuery, ctx: RuntimeContext) -> None:
            who = ctx.participant_id or ""
            self.queries[who] = query
            self.query_id[who] = ctx.metadata.message_id
            self.request[ctx.metadata.message_id] = who

        @subscribe(VOICE_OUTPUT_TOPIC)
        async def on_output(self, output: ResponseOutput, ctx: RuntimeContext) -> None:
            who = self.request.get(output.request_id or "")
            if who is not None:
                self.chunk_at.setdefault(who, time.time())

        @subscribe(AUDIO_OUT_TOPIC)
        async def on_audio(self, frame: AudioFrame, ctx: RuntimeContext) -> None:
            who = ctx.participant_id or ""
            if who in self.chunk_at:
                self.audio_at.setdefault(who, time.time())
                self.changed.set()

        @subscribe(TURNS_TOPIC)
        async def on_record(self, record: TurnRecord, ctx: RuntimeContext) -> None:
            self.records[record.turn_id] = record
            self.changed.set()

        async def until(self, done: Any, timeout_s: float) -> bool:
            deadline = time.monotonic() + timeout_s
            while not done():
                self.changed.clear()
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    return False
                try:
                    await asyncio.wait_for(self.changed.wait(), remaining)
                except TimeoutError:
                    pass
            return True

    directory = Path(tempfile.mkdtemp(prefix="xrmq-voice-speakers-"))
    silence = np.zeros(8000, np.float32)
    questions = []
    for index, question in enumerate(QUESTIONS):
        samples, rate = read_wav(speak(question, directory, f"q{index}"))
        questions.append(resample(samples, rate))
    rounds: list[Round] = []
    async with PrivateStack(_config(fit, step)) as stack:
        runtime = AgentRuntime(stack.bus, name="speakers")
        watch = runtime.register("watch", Watch())
        pids = {label: stack.pid(label) for label in _labels(stack)}
        async with runtime:
            for count in speakers:
                who_all = [f"s{count}-{index}" for index in range(count)]
                streams = {
                    who: list(
                        frames(
                            float_to_pcm16(
                                np.concatenate(
                                    [silence, questions[index % len(questions)], silence, silence]
                                )
                            )
                        )
                    )
                    for index, who in enumerate(who_all)
                }
                before = {label: _cpu_s(pid) for label, pid in pids.items()}
                await send_together(runtime, streams)
                if not await watch.until(partial(_all_in, who_all, watch.audio_at), 180):
                    raise TimeoutError(f"{count} speaker(s): no reply audio for every one")
                after = {label: _cpu_s(pid) for label, pid in pids.items()}
                ids = [watch.query_id[who] for who in who_all]
                await watch.until(partial(_all_in, ids, watch.records), RECORD_WAIT_S)
                result = Round(count)
                for who in who_all:
                    query = watch.queries[who]
                    end_s = (query.speech_end_us or 0) / 1e6
                    result.to_text.append((query.transcribed_us or 0) / 1e6 - end_s)
                    result.to_chunk.append(watch.chunk_at[who] - end_s)
                    result.to_audio.append(watch.audio_at[who] - end_s)
                for who in who_all:
                    record = watch.records.get(watch.query_id[who])
                    share = None if record is None else own_share(record)
                    if share is None:
                        result.unshared += 1
                    else:
                        result.shares.append(share)
                result.cpu_per_turn = {
                    label: (after[label] - before[label]) / count for label in pids
                }
                rounds.append(result)
    return rounds


def _all_in(keys: list[str], found: dict[str, Any]) -> bool:
    return all(key in found for key in keys)


def _labels(stack: Any) -> list[str]:
    from xrmq.actors.edge.private_stack import StackError

    labels = []
    for label in stack.config.processes:
        try:
            stack.pid(label)
        except StackError:
            continue  # a process not running (none here), or one with replicas
        labels.append(label)
    return labels


def speaker_rounds(mode: str, speakers: tuple[int, ...] = SPEAKERS) -> list[Round]:
    """One stack in ``mode`` (see ``MODES``), a round for each number of ``speakers``."""
    fit, step = MODES[mode]
    return asyncio.run(_rounds(fit, step, speakers))
