"""The microphone's device half (``input_stream``, ``forward_blocks``), which ``xrmq voice
--mic`` and ``xrmq console`` share: a sound device cannot exist here, so a stand-in for
sounddevice's ``RawInputStream`` calls the stream's callback from a thread of its own, as
PortAudio does."""

from __future__ import annotations

import asyncio
import threading
from typing import Any

from xrmq.actors.voice.mic import forward_blocks, input_stream
from xrmq.actors.voice.pcm import FRAME_MS, SAMPLE_RATE


class Device:
    """A module with ``RawInputStream``: while the stream runs, its thread calls the callback
    with each of ``blocks``."""

    def __init__(self, blocks: list[bytes]) -> None:
        self.blocks = blocks
        self.settings: dict[str, Any] = {}
        self.delivered = threading.Event()

    def RawInputStream(self, **settings: Any) -> Any:
        self.settings = settings
        device = self

        class Stream:
            def __enter__(self) -> Stream:
                def run() -> None:
                    for block in device.blocks:
                        settings["callback"](block, len(block) // 2, None, None)
                    device.delivered.set()

                self.thread = threading.Thread(target=run)
                self.thread.start()
                return self

            def __exit__(self, *exc: object) -> None:
                self.thread.join()

        return Stream()


async def test_the_devices_blocks_are_sent_in_order_until_stop():
    blocks = [bytes([index]) * 640 for index in range(5)]
    device = Device(blocks)
    sent: list[bytes] = []
    stop = asyncio.Event()

    async def send(block: bytes) -> None:
        sent.append(block)
        if len(sent) == len(blocks):
            stop.set()

    stream, queue = input_stream(device)
    with stream:
        await asyncio.wait_for(forward_blocks(queue, send, stop), 10)
    assert sent == blocks
    assert device.settings["samplerate"] == SAMPLE_RATE
    assert device.settings["blocksize"] == SAMPLE_RATE * FRAME_MS // 1000


async def test_a_stalled_sender_loses_the_oldest_blocks_and_the_queue_stays_bounded():
    blocks = [index.to_bytes(2, "big") * 320 for index in range(150)]
    device = Device(blocks)
    stream, queue = input_stream(device)
    with stream:  # nobody forwards while the device delivers
        # The device's hand-overs were queued on the loop before this wait's result was.
        await asyncio.to_thread(device.delivered.wait, 10)
    kept = [queue.get_nowait() for _ in range(queue.qsize())]
    assert kept == blocks[-100:]
