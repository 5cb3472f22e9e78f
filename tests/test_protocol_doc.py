"""docs/protocol.md is enough for another language (issue 17, item 6).

``DocClient`` knows only what docs/protocol.md says (raw pyzmq and MessagePack, no xrmq
import in its code): it subscribes to the participant's replies and turn ends, waits
for readiness with a probe, publishes a ``UserQuery`` on ``voice.query`` and reads the
streamed answer to its ``message_id`` until the destination's final fragment (a missing
``final`` read as true) and the router's ``TurnEnded``.
"""

from __future__ import annotations

import asyncio
import time
import uuid

import msgspec
import pytest
import zmq

from xrmq.actors.conversation import Conversation
from xrmq.actors.models import OfflineLLM
from xrmq.actors.routing import AgentRouter, SingleDestination
from xrmq.actors.runtime import AgentRuntime
from xrmq.topics import QUERY_TOPIC, VOICE_OUTPUT_TOPIC

from buses import broker_process
from router_doubles import FakeContext

NUL = b"\x00"


class DocClient:
    """docs/protocol.md's "Asking and reading the answer", step by step, for participant ``p1``."""

    def __init__(self, bus: str, participant: str = "p1") -> None:
        prefix = bus[len("ipc://") :]  # `ipc:///path/prefix`: prefix.in, prefix.out
        self.context = zmq.Context()
        self.pub = self.context.socket(zmq.PUB)
        self.pub.connect(f"ipc://{prefix}.in")
        self.sub = self.context.socket(zmq.SUB)
        self.sub.connect(f"ipc://{prefix}.out")
        self.participant = participant.encode()
        self.sender = f"doc-{uuid.uuid4().hex[:8]}"
        self.seq = 0

    def ready(self) -> None:
        # 1. subscribe to the participant's replies and turn ends, then wait for readiness
        for topic in (b"voice.output", b"voice.turn_ended"):
            self.sub.setsockopt(zmq.SUBSCRIBE, topic + NUL + self.participant + NUL)
        private = f"_probe.{self.sender}".encode() + NUL
        self.sub.setsockopt(zmq.SUBSCRIBE, private)
        probe = private + NUL + b"?" + uuid.uuid4().hex.encode()
        deadline = time.monotonic() + 10
        while not (self.sub.poll(50) and self.sub.recv_multipart()[0] == probe):
            assert time.monotonic() < deadline, "no broker answered the probe"
            self.pub.send_multipart([probe, b"", b""])

    def ask(self, text: str) -> str:
        # 2. publish the query; the turn id is this message's metadata message_id
        self.seq += 1
        message_id = uuid.uuid4().hex
        now_us = time.time_ns() // 1000
        metadata = {
            "message_id": message_id,
            "source": "doc-client",
            "sender": self.sender,
            "epoch": now_us,
            "seq": self.seq,
            "timestamp_us": now_us,
            "participant_id": self.participant.decode(),
        }
        self.pub.send_multipart(
            [
                b"voice.query" + NUL + self.participant + NUL,
                msgspec.msgpack.encode(metadata),
                msgspec.msgpack.encode({"text": text, "timestamp_us": now_us}),
            ]
        )
        return message_id

    def read_turn(
        self, message_id: str, timeout: float = 20
    ) -> tuple[dict[tuple[str, str], str], dict]:
        """3. and 4.: the text of every stream (by source and response_id), and the TurnEnded."""
        streams: dict[tuple[str, str], str] = {}
        answered = False
        ended = None
        deadline = time.monotonic() + timeout
        while not (answered and ended is not None):
            assert self.sub.poll(int(max(deadline - time.monotonic(), 0) * 1000)), (streams, ended)
            key, raw_metadata, raw_payload = self.sub.recv_multipart()
            topic = key.split(NUL)[0]
            metadata = msgspec.msgpack.decode(raw_metadata)
            payload = msgspec.msgpack.decode(raw_payload)
            if topic == b"voice.turn_ended" and payload["request_id"] == message_id:
                ended = payload
            elif topic == b"voice.output" and payload.get("request_id") == message_id:
                assert payload["kind"] == "reply"
                stream = (metadata["source"], payload.get("response_id"))
                streams[stream] = streams.get(stream, "") + payload.get("text", "")
                if payload.get("final", True) and metadata["source"] != "router":
                    answered = True
            if ended is not None and ended["status"] != "answered":
                break  # nobody answered: the router's text and its TurnEnded are all there is
        return streams, ended

    def close(self) -> None:
        self.pub.close(linger=1000)
        self.sub.close(linger=0)
        self.context.term()


@pytest.mark.timeout(60)
async def test_a_client_that_follows_the_protocol_doc_reads_a_whole_answer_and_the_turns_end():
    with broker_process() as bus:
        runtime = AgentRuntime(bus, name="box")
        context = FakeContext()
        context.blocks = lambda participant: ()
        conversation = Conversation(
            OfflineLLM(time_to_first_token_s=0, tokens_per_second=0),
            context=context,
            runtime=runtime,
            output_topic=VOICE_OUTPUT_TOPIC,
        )
        runtime.register(
            "router",
            AgentRouter(
                {"conversation": conversation},
                SingleDestination(),
                query_topic=QUERY_TOPIC,
                output_topic=VOICE_OUTPUT_TOPIC,
            ),
        )
        async with runtime:
            client = DocClient(bus)
            try:
                await asyncio.to_thread(client.ready)
                message_id = client.ask("My badge number is 4471, please remember it.")
                streams, ended = await asyncio.to_thread(client.read_turn, message_id)
            finally:
                client.close()
    [(source, _)] = streams
    assert source == "conversation"
    # every fragment, in order
    assert list(streams.values()) == ["Noted: your badge number is 4471."]
    assert ended == {
        "request_id": message_id,
        "status": "answered",
        "route": "conversation",
        "error": None,
    }
