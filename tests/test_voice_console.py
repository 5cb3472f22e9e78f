"""``xrmq console``: a WAV spoken to a running box, the answer written as a WAV, barge-in.

The box is the voice demo's stack (a ``voice`` process, Piper speech out) on a private
bus; the participant's context holds the demo's three notes. The console runs as the
installed command, without audio hardware (``--wav-in``, ``--wav-out``).
"""

from __future__ import annotations

import asyncio
import os
import sys
from pathlib import Path

import pytest

from xrmq.actors.edge.private_stack import PrivateStack
from xrmq.actors.edge.voice_demo import PARTICIPANT, VoiceSession, voice_config
from xrmq.actors.voice.pcm import read_wav, resample
from xrmq.actors.voice.wer import words

from voice_support import shared_stt, speak

pytestmark = pytest.mark.timeout(240)

ANSWER = "The spare key is in drawer 12 of the blue cabinet in lab 3."


def xrmq_command() -> list[str]:
    script = Path(sys.executable).parent / "xrmq"
    return [str(script)] if script.exists() else [sys.executable, "-m", "xrmq.actors.cli"]


async def console(tmp_path: Path, *args: str) -> tuple[int, str, str]:
    process = await asyncio.create_subprocess_exec(
        *xrmq_command(),
        "console",
        *args,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
        env={**os.environ, "XRMQ_RUNTIME_DIR": str(tmp_path)},
    )
    out, err = await asyncio.wait_for(process.communicate(), 180)
    assert process.returncode is not None
    return process.returncode, out.decode(), err.decode()


async def heard_in(path: Path) -> list[str]:
    samples, rate = read_wav(path)
    return words(await shared_stt().transcribe(resample(samples, rate)))


async def test_the_console_speaks_a_wav_to_a_box_and_writes_the_answer_it_heard(tmp_path):
    question = speak(tmp_path, "question", "Where did I leave the spare key?")
    answers = tmp_path / "out"
    config = voice_config()
    async with PrivateStack(config) as stack, VoiceSession(stack.bus, tmp_path, config):
        code, out, err = await console(
            tmp_path,
            *("--bus", stack.bus, "--participant", PARTICIPANT),
            *("--wav-in", str(question), "--wav-out", str(answers)),
        )
    assert code == 0, out + err
    assert f"[{PARTICIPANT}] heard: " in out
    assert f"[assistant] {ANSWER}" in out
    assert "end of speech -> first audio " in out
    [answer] = sorted(answers.glob("*.wav"))
    heard = await heard_in(answer)
    assert "drawer" in heard and ("12" in heard or "twelve" in heard), heard


async def test_speaking_over_the_answer_barges_in_and_cuts_its_playback(tmp_path):
    question = speak(tmp_path, "question", "Where did I leave the spare key?")
    over = speak(tmp_path, "over", "Wait, stop, tell me about the kettle instead please.")
    answers = tmp_path / "out"
    config = voice_config()
    async with PrivateStack(config) as stack, VoiceSession(stack.bus, tmp_path, config):
        code, out, err = await console(
            tmp_path,
            *("--bus", stack.bus, "--participant", PARTICIPANT, "--barge-in"),
            *("--wav-in", str(question), "--wav-in", str(over), "--wav-out", str(answers)),
        )
    assert code == 0, out + err
    assert "<barged in: playback cut after " in out
    assert "(1 cut by barge-in)" in out
    cut = sorted(answers.glob("*.wav"))[0]
    samples, rate = read_wav(cut)
    full_s = len(words(ANSWER)) * 0.3  # Piper says the answer in about 3.7 s
    assert samples.size / rate < 0.5 * full_s, f"{samples.size / rate:.2f} s played of the answer"


def test_the_console_without_portaudio_says_so_in_one_line_with_a_hint(tmp_path):
    import subprocess

    hidden = tmp_path / "no-sounddevice"
    hidden.mkdir()
    # None in sys.modules makes `import sounddevice` fail, as without PortAudio.
    (hidden / "sitecustomize.py").write_text("import sys\n\nsys.modules['sounddevice'] = None\n")
    env = {**os.environ, "PYTHONPATH": str(hidden), "XRMQ_RUNTIME_DIR": str(tmp_path)}
    result = subprocess.run(
        [*xrmq_command(), "console"], capture_output=True, text=True, env=env, timeout=60
    )
    assert result.returncode == 1
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith("xrmq console: no speaker: sounddevice needs the PortAudio")
    assert "apt-get install libportaudio2" in lines[0]
    assert "--wav-in FILE and --wav-out DIR run the console without audio hardware" in lines[0]
