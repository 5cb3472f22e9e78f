"""Voice suite, false cuts: does a pause inside a sentence end the speaker's turn?

A ``VoiceInput`` in this process, configured as the box's (sentence-end pause 0.2 s,
hangover 0.4 s, context biasing), hears in real time: the demo's questions (no pause:
a second utterance is a false cut), and sentences spoken in two pieces with a pause
between (espeak-ng's own trailing silence trimmed, so the pause is what is set: 0.3 and
0.35 s, between the sentence-end pause and the hangover, where the words so far decide).
A sentence heard as more than one utterance is a false cut; ``early`` counts the
utterances ended at the sentence-end pause (the cut's cause when both pieces are heard
apart and an early end happened, else the VAD's silence reached the hangover).
"""

from __future__ import annotations

import asyncio
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from xrmq.actors.voice.listener import VoiceCounts
    from xrmq.actors.voice.stt import WhisperSTT

INNER_PAUSES = (0.3, 0.35)
PIECES = (
    ("Where did I leave the", "spare key?"),
    ("The fire drill starts at", "half past two."),
    ("What is the temperature", "of the kettle in lab 3?"),
    ("My badge number is", "four four seven one."),
    ("Where is the key", "for the blue cabinet?"),
    ("Is the kettle on", "in lab 3?"),
    ("Tell me about the forklift", "and the charging bay."),
    ("Which pallet is next to", "Bob at the loading dock?"),
)
"""Sentences cut in two where a speaker might pause; the last three first pieces could
themselves be questions, which the words-so-far rule cannot tell from a whole one."""


@dataclass
class Cuts:
    sentences: int = 0
    cut: int = 0
    early: int = 0


async def _heard(
    stt: WhisperSTT, pieces: tuple[str, ...], pause_s: float, directory: Path
) -> tuple[int, int]:
    import numpy as np

    from xrmq.actors.edge.voice_demo import CONTEXT_NOTES, speak
    from xrmq.actors.runtime import AgentRuntime
    from xrmq.actors.voice.listener import (
        VOICE_INPUT_KIND,
        VoiceInput,
        VoiceSettings,
        register_voice_input,
    )
    from xrmq.actors.voice.mic import FrameSender
    from xrmq.actors.voice.pcm import float_to_pcm16, read_wav, resample
    from xrmq.actors.voice.vad import SegmenterSettings
    from xrmq.schemas import ContextBlock

    context = (ContextBlock(None, " ".join(CONTEXT_NOTES)),)
    runtime = AgentRuntime()
    settings = VoiceSettings(
        segmenter=SegmenterSettings(pause_silence_s=0.2, trailing_silence_s=0.4)
    )
    register_voice_input(runtime, stt, settings=settings, context=lambda participant: context)
    audio = [np.zeros(4800, np.float32)]
    for index, piece in enumerate(pieces):
        samples, rate = read_wav(speak(piece, directory, f"piece-{index}"))
        voiced = resample(samples, rate)
        loud = np.nonzero(np.abs(voiced) > 0.01)[0]
        audio += [voiced[: loud[-1] + 1], np.zeros(round(pause_s * 16000), np.float32)]
    audio.append(np.zeros(32000, np.float32))
    async with runtime:
        await FrameSender(runtime, "p1").send(float_to_pcm16(np.concatenate(audio)))
        instance = runtime.keyed_instances(VOICE_INPUT_KIND)["p1"]
        assert isinstance(instance, VoiceInput)

        def decided(counts: VoiceCounts) -> bool:
            done = counts.queries + counts.empty_transcripts + counts.backchannels
            return counts.utterances > 0 and done + counts.stt_failures >= counts.utterances

        counts = await asyncio.wait_for(instance.wait_until(decided), 120)
    return counts.utterances, counts.early_ends


def false_cuts(fit: bool) -> dict[str, Cuts]:
    """``{"demo questions" | "inner pause 0.3 s" | ...: Cuts}`` with Whisper fitted or padded."""
    from xrmq.actors.edge.voice_demo import QUESTIONS
    from xrmq.actors.voice.stt import WhisperSTT

    stt = WhisperSTT(fit_audio=fit)
    stt.load()
    directory = Path(tempfile.mkdtemp(prefix="xrmq-voice-cuts-"))
    cases: dict[str, list[tuple[tuple[str, ...], float]]] = {
        "demo questions": [((question,), 0.0) for question in QUESTIONS]
    }
    for pause in INNER_PAUSES:
        cases[f"inner pause {pause} s"] = [(pieces, pause) for pieces in PIECES]
    results: dict[str, Cuts] = {}
    for name, runs in cases.items():
        tally = results.setdefault(name, Cuts())
        for pieces, pause in runs:
            utterances, early = asyncio.run(_heard(stt, pieces, pause, directory))
            tally.sentences += 1
            tally.cut += utterances > 1
            tally.early += early
    return results
