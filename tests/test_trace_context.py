"""The W3C trace context on the bus (``MessageMetadata.traceparent``): a publisher that traces
sets it, everything a handler publishes or replies while handling the message inherits it,
and the runtime never makes one up; a malformed one is refused where frames are decoded."""

from __future__ import annotations

import asyncio
from typing import Any

import msgspec
import pytest

from xrmq.actors.runtime import Agent, AgentRuntime, RuntimeContext, subscribe
from xrmq.schemas import MessageMetadata
from xrmq.topics import Topic

pytestmark = pytest.mark.timeout(30)

TRACEPARENT = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"


class Word(msgspec.Struct, frozen=True):
    text: str


ASKED = Topic("test.trace.asked", Word)
ECHOED = Topic("test.trace.echoed", Word)


class Echo(Agent):
    """Publishes each word it hears on ``ECHOED`` and answers it."""

    @subscribe(ASKED)
    async def echo(self, word: Word, ctx: RuntimeContext) -> str:
        await ctx.publish(ECHOED, Word(word.text))
        return word.text


class Listener(Agent):
    def __init__(self, count: int) -> None:
        self.metadata: list[MessageMetadata] = []
        self.count = count
        self.done = asyncio.Event()

    @subscribe(ECHOED)
    async def hear(self, word: Word, ctx: RuntimeContext) -> None:
        self.metadata.append(ctx.metadata)
        if len(self.metadata) >= self.count:
            self.done.set()


async def test_what_a_handler_publishes_carries_the_trace_context_of_what_it_handles():
    listener = Listener(2)
    runtime = AgentRuntime()
    runtime.register("echo", Echo())
    runtime.register("listener", listener)
    async with runtime:
        runtime.send(ASKED, Word("traced"), participant_id="p1", traceparent=TRACEPARENT)
        runtime.send(ASKED, Word("plain"), participant_id="p1")
        await listener.done.wait()
    assert [m.traceparent for m in listener.metadata] == [TRACEPARENT, None]


async def test_a_reply_carries_the_trace_context_of_its_request():
    runtime = AgentRuntime()
    runtime.register("echo", Echo())
    async with runtime:
        # an ask sent by hand with a trace context, its reply taken where the runtime
        # resolves it (the frame and its metadata)
        asks = runtime._asks
        message_id = runtime.send(
            ASKED, Word("hi"), participant_id="p1", reply_to=asks._inbox, traceparent=TRACEPARENT
        )
        future: Any = asyncio.get_running_loop().create_future()
        asks.pending[message_id] = future
        frame, metadata = await future
    assert metadata.traceparent == TRACEPARENT
    assert msgspec.msgpack.decode(frame) == "hi"


@pytest.mark.parametrize(
    "value",
    [
        "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7",  # no flags
        "00-4BF92F3577B34DA6A3CE929D0E0E4736-00f067aa0ba902b7-01",  # upper case
        "not a traceparent",
    ],
)
def test_a_malformed_traceparent_is_refused_naming_the_field(value):
    frame = msgspec.msgpack.encode(
        {
            "message_id": "m1",
            "source": "s",
            "sender": "r",
            "epoch": 1,
            "seq": 1,
            "timestamp_us": 1,
            "traceparent": value,
        }
    )
    with pytest.raises(msgspec.ValidationError, match="traceparent"):
        msgspec.msgpack.decode(frame, type=MessageMetadata)


def test_a_later_versions_traceparent_with_more_fields_is_accepted():
    frame = msgspec.msgpack.encode(
        {
            "message_id": "m1",
            "source": "s",
            "sender": "r",
            "epoch": 1,
            "seq": 1,
            "timestamp_us": 1,
            "traceparent": TRACEPARENT.replace("00-", "01-", 1) + "-extra",
        }
    )
    assert msgspec.msgpack.decode(frame, type=MessageMetadata).traceparent
