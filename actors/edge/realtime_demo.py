"""``xrmq demo --realtime``: a spoken realtime session that rolls over and still remembers.

The edge stack on a private bus with one ``kind = "realtime"`` destination on the offline
realtime server (``provider = "offline"``: the OpenAI Realtime protocol on loopback,
inside the conversation process) and a context window small enough that a few turns
fill it. The participant speaks (espeak-ng into 16 kHz audio, published on ``audio.in``
as fast as the bus takes it): a fact first, then more facts until the destination's gauges
(``realtime.<participant>.rollovers`` in its ``RuntimeMetrics``) show a rollover, then a
question about the first fact. Each answer is waited for (the reply on the output topic
and the end of its spoken audio, ``audio.playback`` done) before the next turn, as a
listener would. It prints every answer and the rollover's phases (from the gauges) and
exits 0 with ``ok`` when a rollover happened and the last answer recalls the first fact.

Needs the ``realtime`` extra (websockets) and the ``voice`` extra (the offline server's
speech-to-text) plus espeak-ng; ``missing_requirements`` names what is absent.
"""

from __future__ import annotations

import asyncio
import importlib.util
import shutil
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import TextIO

import msgspec

from xrmq.actors.realtime.config import RealtimeConfig
from xrmq.actors.runtime import Agent, AgentRuntime, RuntimeContext, subscribe
from xrmq.schemas import AudioPlayback, ResponseOutput, RuntimeMetrics
from xrmq.topics import AUDIO_PLAYBACK_TOPIC, METRICS_TOPIC, VOICE_OUTPUT_TOPIC

from .config import DestinationConfig, EdgeConfig, ProcessConfig, RestartPolicyConfig
from .config_loader import default_config
from .private_stack import PrivateStack

PARTICIPANT = "alice"
DESTINATION = "realtime"
FIRST_FACT = "My sister lives in Paris."
MORE_FACTS = (
    "The fire drill starts at gate B.",
    "My car is the blue one.",
    "The plant needs water on Fridays.",
    "The meeting is at noon.",
    "The cafe opens at eight.",
    "The printer is in room twelve.",
)
QUESTION = "Where does my sister live?"
EXPECTED = "paris"
MAX_CONTEXT_TOKENS = 120
"""Small enough that about four spoken exchanges fill the session to ``rollover_at``."""
SYSTEM_PROMPT = "You are a realtime voice assistant. Answer briefly."
TURN_TIMEOUT_S = 60.0
PHASES = ("boundary_wait", "checkpoint", "handshake", "replay")


def missing_requirements() -> list[str]:
    """What the realtime demo needs that is not installed, as install hints."""
    missing = []
    if importlib.util.find_spec("websockets") is None:
        missing.append("the realtime extra (websockets): pip install -e '.[realtime]'")
    if importlib.util.find_spec("faster_whisper") is None:
        missing.append("the voice extra (speech-to-text): pip install -e '.[voice]'")
    if shutil.which("espeak-ng") is None:
        missing.append("espeak-ng (speech): apt-get install espeak-ng")
    return missing


def realtime_config() -> EdgeConfig:
    """The built-in default with its one destination a realtime one on the offline server."""
    base = default_config()
    destination = DestinationConfig(
        description="Realtime voice conversation: answers speech with speech.",
        kind="realtime",
        system_prompt=SYSTEM_PROMPT,
        realtime=RealtimeConfig(
            provider="offline", max_context_tokens=MAX_CONTEXT_TOKENS, keep_tail=2
        ),
    )
    router = msgspec.structs.replace(base.router, default=DESTINATION)
    supervisor = msgspec.structs.replace(
        base.supervisor,
        metrics_interval_s=0.25,
        ready_timeout_s=60.0,
        shutdown_timeout_s=5.0,
        restart=RestartPolicyConfig(max_crashes=1),
    )
    processes: dict[str, ProcessConfig] = {
        name: msgspec.structs.replace(spec, on_give_up="stop_box")
        for name, spec in base.processes.items()
        if name != "renderer"
    }
    context = msgspec.structs.replace(base.context, persist=False)
    return msgspec.structs.replace(
        base,
        destinations={DESTINATION: destination},
        router=router,
        supervisor=supervisor,
        processes=processes,
        context=context,
    )


class Listener(Agent):
    """The participant's ears: finished replies, playback ends, the destination's gauges."""

    def __init__(self) -> None:
        self.texts: dict[str, list[str]] = {}
        self.answers: list[str] = []
        self.playback_done = 0
        self.seen: dict[str, float] = {}
        """The destination's latest ``realtime.<participant>.*`` gauges, by name."""
        self.timings: list[tuple[float, float]] = []
        """Per turn: from the speech sent to the reply's end, and to its audio's end."""
        self.changed = asyncio.Event()

    @subscribe(VOICE_OUTPUT_TOPIC)
    async def on_reply(self, output: ResponseOutput, ctx: RuntimeContext) -> None:
        if ctx.participant_id != PARTICIPANT:
            return
        parts = self.texts.setdefault(output.response_id or "", [])
        parts.append(output.text)
        if output.final:
            self.answers.append("".join(parts).strip())
        self.changed.set()

    @subscribe(AUDIO_PLAYBACK_TOPIC)
    async def on_playback(self, message: AudioPlayback, ctx: RuntimeContext) -> None:
        if ctx.participant_id == PARTICIPANT and message.state == "done":
            self.playback_done += 1
            self.changed.set()

    @subscribe(METRICS_TOPIC)
    async def on_metrics(self, metrics: RuntimeMetrics, ctx: RuntimeContext) -> None:
        prefix = f"realtime.{PARTICIPANT}."
        found = {k[len(prefix) :]: v for k, v in metrics.gauges.items() if k.startswith(prefix)}
        if found:
            self.seen = found
            self.changed.set()

    async def until(self, predicate: Callable[[], bool], what: str) -> None:
        deadline = time.monotonic() + TURN_TIMEOUT_S
        while not predicate():
            self.changed.clear()
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise TimeoutError(f"realtime demo: no {what} within {TURN_TIMEOUT_S:.0f} s")
            try:
                await asyncio.wait_for(self.changed.wait(), remaining)
            except TimeoutError:
                pass


async def _turn(runtime: AgentRuntime, listener: Listener, text: str, directory: Path) -> str:
    """Speak ``text`` and return the answer once its audio has finished playing."""
    from xrmq.actors.voice.mic import FrameSender, wav_pcm

    from .voice_demo import speak

    answers, played = len(listener.answers), listener.playback_done
    pcm = wav_pcm(speak(text, directory, f"turn-{answers}"), lead_s=0.2, tail_s=0.8)
    await FrameSender(runtime, PARTICIPANT, realtime=False).send(pcm)  # no need to wait
    sent = time.monotonic()
    await listener.until(lambda: len(listener.answers) > answers, "answer")
    replied = time.monotonic()
    await listener.until(lambda: listener.playback_done > played, "end of the spoken answer")
    listener.timings.append((replied - sent, time.monotonic() - sent))
    return listener.answers[answers]


async def run_realtime_demo(out: TextIO = sys.stdout, *, verbose: bool = False) -> int:
    """``xrmq demo --realtime``: 0 when a rollover happened and the first fact was recalled."""
    missing = missing_requirements()
    if missing:
        out.write(
            "xrmq demo --realtime: needs " + "; ".join(missing) + " (with -c constraints.txt)\n"
        )
        return 1
    out.write("xrmq demo --realtime: starting the edge stack with a realtime destination...\n")
    out.flush()
    stack = PrivateStack(realtime_config(), echo=sys.stderr if verbose else None)
    try:
        with tempfile.TemporaryDirectory(prefix="xrmq-realtime-demo-") as spoken:
            async with stack:
                answer, gauges = await _session(stack.bus, Path(spoken), out)
    except (TimeoutError, RuntimeError) as error:
        out.write(
            f"\nxrmq demo --realtime: FAILED: {error}\nlast lines of the stack:\n{stack.tail(15)}\n"
        )
        return 1
    out.write(
        f"xrmq demo --realtime: {gauges.get('rollovers', 0):g} rollovers, epoch "
        f"{gauges.get('epoch', 0):g}, pressure {gauges.get('pressure', 0):.2f}, stale events "
        f"{gauges.get('stale_events', 0):g}\n"
    )
    if EXPECTED not in answer.lower():
        out.write(f"xrmq demo --realtime: FAILED: the answer does not recall {EXPECTED!r}\n")
        return 1
    out.write("xrmq demo --realtime: ok\n")
    return 0


async def _session(bus: str, directory: Path, out: TextIO) -> tuple[str, dict[str, float]]:
    """Facts until a rollover, then the question; (its answer, the last gauges)."""
    runtime = AgentRuntime(bus, name="realtime-demo")
    listener = runtime.register("listener", Listener(), participant_id=PARTICIPANT)
    await runtime.start()
    try:
        for index, text in enumerate([FIRST_FACT, *MORE_FACTS]):
            answer = await _turn(runtime, listener, text, directory)
            out.write(f"[{PARTICIPANT}] said: {text}\n  answer: {answer}{_took(listener)}\n")
            out.flush()
            if listener.seen.get("rollovers", 0) >= 1 and index >= 1:
                break
        await listener.until(lambda: listener.seen.get("rollovers", 0) >= 1, "rollover")
        out.write(_rollover_line(listener.seen))
        answer = await _turn(runtime, listener, QUESTION, directory)
        out.write(f"[{PARTICIPANT}] said: {QUESTION}\n  answer: {answer}{_took(listener)}\n")
        return answer, dict(listener.seen)
    finally:
        await runtime.stop()


def _took(listener: Listener) -> str:
    replied, spoken = listener.timings[-1]
    return f"  (reply {replied * 1000:.0f} ms, spoken by {spoken * 1000:.0f} ms)"


def _rollover_line(gauges: dict[str, float]) -> str:
    phases = ", ".join(
        f"{phase} {gauges[f'rollover_{phase}_ms']:.0f} ms"
        for phase in PHASES
        if f"rollover_{phase}_ms" in gauges
    )
    return f"  rolled over to epoch {gauges.get('epoch', 0):g}: {phases or 'phases not reported'}\n"
