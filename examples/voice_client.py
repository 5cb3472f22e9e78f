"""A voice client in a page: speak a WAV into the bus, save the spoken answer as a WAV.

python examples/voice_client.py BUS PARTICIPANT QUESTION.wav OUT_DIR

It publishes the WAV on ``audio.in`` as 20 ms frames in real time (what a headset's
microphone would send), and writes the ``audio.out`` frames of the answer to OUT_DIR
once ``audio.playback`` says it is done. Needs a running box with a ``voice`` process and
``voice.speech_out = true``: docs/voice.md shows the config, which ``xrmq up --config
FILE`` runs. ``xrmq console --wav-in QUESTION.wav --wav-out OUT_DIR`` does the same in
one command, and shows what was heard and answered.
"""

import asyncio
import sys

from xrmq.actors.runtime import AgentRuntime, run
from xrmq.actors.voice.mic import publish_wav
from xrmq.actors.voice.playback import AudioRecorder


async def main(bus: str, participant: str, wav: str, out_dir: str) -> None:
    recorder = AudioRecorder(out_dir)
    runtime = AgentRuntime(bus)
    runtime.register("speaker", recorder, participant_id=participant)
    async with runtime:
        frames = await publish_wav(runtime, wav, participant)
        print(f"sent {frames} frames", flush=True)
        [answer] = await asyncio.wait_for(recorder.wait_written(1), 120)
        print(f"answer {answer}", flush=True)


if __name__ == "__main__":
    run(main(*sys.argv[1:5]))
