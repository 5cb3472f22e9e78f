"""``xrmq listen`` as a separate OS process, rendering replies published by this one."""

from __future__ import annotations

import argparse
import asyncio
import os
import re
import signal
import sys
import time
from pathlib import Path

import pytest

from xrmq.actors.cli import build_parser
from xrmq.actors.edge.voice_commands import add_commands, build_sink, run_listen
from xrmq.actors.interaction import ResponseOutputs
from xrmq.actors.runtime import AgentRuntime
from xrmq.actors.voice.sinks import ConsoleSink
from xrmq.topics import VOICE_OUTPUT_TOPIC

LINE_TIMEOUT_S = 20.0
"""Upper bound for one expected line; the test never waits for time to pass."""


def test_xrmq_cli_offers_the_listen_command():
    args = build_parser().parse_args(["listen", "--participant", "p1", "--sink", "console"])
    assert args.func is run_listen
    assert (args.topic, args.participant, args.sink, args.wav_dir) == (
        "voice.output",
        "p1",
        "console",
        None,
    )


def listen_args(*argv: str) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="xrmq")
    add_commands(parser.add_subparsers())
    return parser.parse_args(["listen", *argv])


def test_listen_rejects_a_wav_dir_without_the_espeak_sink(tmp_path):
    with pytest.raises(ValueError, match="--wav-dir: only with --sink espeak"):
        build_sink(listen_args("--wav-dir", str(tmp_path)))
    assert isinstance(build_sink(listen_args()), ConsoleSink)


class Process:
    """A child ``xrmq`` process whose stdout is read line by line."""

    def __init__(self, process: asyncio.subprocess.Process, stderr: Path) -> None:
        self.process = process
        self.stderr = stderr

    @classmethod
    async def start(
        cls, tmp_path: Path, name: str, *args: str, ready: str, env: dict | None = None
    ) -> Process:
        stderr = tmp_path / f"{name}.stderr"
        with open(stderr, "wb") as errors:
            process = await asyncio.create_subprocess_exec(
                sys.executable,
                "-m",
                "xrmq.actors.cli",
                *args,
                stdout=asyncio.subprocess.PIPE,
                stderr=errors,
                env={**os.environ, "XRMQ_LOG_LEVEL": "WARNING", **(env or {})},
            )
        child = cls(process, stderr)
        await child.read_until(lambda line: line.startswith(ready))
        return child

    async def read_until(self, condition) -> list[str]:
        lines: list[str] = []
        while True:
            assert self.process.stdout is not None  # started with a pipe
            try:
                raw = await asyncio.wait_for(self.process.stdout.readline(), LINE_TIMEOUT_S)
            except TimeoutError:
                raise AssertionError(
                    f"no expected line; got {lines}; stderr: {self.stderr.read_text()[-2000:]}"
                ) from None
            if not raw:
                raise AssertionError(
                    f"process exited; got {lines}; stderr: {self.stderr.read_text()[-2000:]}"
                )
            lines.append(raw.decode().rstrip("\n"))
            if condition(lines[-1]):
                return lines

    async def stop(self) -> int:
        if self.process.returncode is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                await asyncio.wait_for(self.process.wait(), LINE_TIMEOUT_S)
            except TimeoutError:
                self.process.kill()
                await self.process.wait()
        assert self.process.returncode is not None  # waited for
        return self.process.returncode


async def test_xrmq_listen_in_another_process_renders_replies_published_by_this_one(tmp_path):
    bus = f"ipc://{tmp_path}/bus"
    children: list[Process] = []
    try:
        children.append(
            await Process.start(
                tmp_path, "bus", "bus", "--bus", bus, "--no-capture", ready="xrmq bus: ready"
            )
        )
        listener = await Process.start(
            tmp_path,
            "listen",
            "listen",
            "--bus",
            bus,
            "--participant",
            "p1",
            "--wpm",
            "60000",
            ready="xrmq listen: ready",
        )
        children.append(listener)
        async with AgentRuntime(bus) as runtime:
            conversation = ResponseOutputs(runtime, VOICE_OUTPUT_TOPIC, source="conversation")
            async with conversation.reply("p2", request_id="t0") as other:
                await other.send("Not for this listener.")
            async with conversation.reply(
                "p1", request_id="t1", timestamp_us=time.time_ns() // 1000
            ) as reply:
                await reply.send("Hello from ")
                await reply.send("another process.")
            lines = await listener.read_until(lambda line: line.endswith("process."))
        assert await listener.stop() == 0
    finally:
        for child in reversed(children):
            await child.stop()
    pattern = re.compile(r"^\[p1\] conversation \+\d+ms: (.+)$")
    matches = [pattern.match(line) for line in lines]
    assert all(matches), lines
    assert " ".join(match.group(1) for match in matches) == "Hello from another process."


@pytest.mark.parametrize(
    ("status", "error"),
    [
        (1, "espeak-ng exited with 1: audio open error: No such file or directory"),
        # espeak-ng may exit 0 after it failed to open the audio device, saying so on stderr
        (0, "espeak-ng exited with 0 but failed: audio open error: No such file or directory"),
    ],
)
async def test_listen_with_the_espeak_sink_prints_espeak_ngs_error_and_exits_non_zero(
    tmp_path, status, error
):
    fake = tmp_path / "bin"  # a test double of espeak-ng whose device fails mid-session:
    fake.mkdir()  # the device check before ready (no text) passes, the first reply fails
    (fake / "espeak-ng").write_text(
        '#!/bin/sh\ntext=$(cat)\n[ -z "$text" ] && exit 0\n'
        "echo 'audio open error: No such file or directory' >&2\n"
        f"exit {status}\n"
    )
    (fake / "espeak-ng").chmod(0o755)
    bus = f"ipc://{tmp_path}/bus"
    broker = await Process.start(
        tmp_path, "bus", "bus", "--bus", bus, "--no-capture", ready="xrmq bus: ready"
    )
    try:
        listener = await Process.start(
            tmp_path,
            "listen",
            *("listen", "--bus", bus, "--participant", "p1", "--sink", "espeak"),
            ready="xrmq listen: ready",
            env={"PATH": f"{fake}{os.pathsep}{os.environ['PATH']}"},
        )
        try:
            async with AgentRuntime(bus) as runtime:
                conversation = ResponseOutputs(runtime, VOICE_OUTPUT_TOPIC, source="conversation")
                async with conversation.reply("p1", request_id="t1") as reply:
                    await reply.send("Hello.")
                code = await asyncio.wait_for(listener.process.wait(), LINE_TIMEOUT_S)
        finally:
            await listener.stop()
    finally:
        await broker.stop()
    assert code == 1
    assert f"xrmq listen: the espeak sink failed: {error}" in listener.stderr.read_text()


def test_listen_with_the_espeak_sink_and_no_sound_card_says_so_in_one_line_before_ready(tmp_path):
    import subprocess

    fake = tmp_path / "bin"  # espeak-ng on a machine without a sound card: ALSA's notices,
    fake.mkdir()  # its own error line, and exit 0
    (fake / "espeak-ng").write_text(
        "#!/bin/sh\ncat >/dev/null\n"
        "echo \"ALSA lib confmisc.c:855:(parse_card) cannot find card '0'\" >&2\n"
        "echo 'ALSA lib pcm.c:2666:(snd_pcm_open_noupdate) Unknown PCM default' >&2\n"
        "echo 'error: No such file or directory' >&2\n"
        "exit 0\n"
    )
    (fake / "espeak-ng").chmod(0o755)
    bus = f"ipc://{tmp_path}/bus"
    (tmp_path / "bus.out").touch()  # listen checks the socket file before connecting
    result = subprocess.run(
        [sys.executable, "-m", "xrmq.actors.cli", "listen", "--bus", bus, "--sink", "espeak"],
        capture_output=True,
        text=True,
        env={**os.environ, "PATH": f"{fake}{os.pathsep}{os.environ['PATH']}"},
        timeout=LINE_TIMEOUT_S * 2,
    )
    assert result.returncode == 1
    assert "xrmq listen: ready" not in result.stdout
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert lines == [
        "xrmq listen: espeak-ng cannot play on this machine's audio device (espeak-ng exited "
        "with 0 but failed: error: No such file or directory); no sound card? --wav-dir DIR "
        "writes the speech as WAV files instead"
    ], result.stderr
