"""``Publisher``: one-line publishing from a script without asyncio (issue 17, item 8)."""

from __future__ import annotations

import asyncio

import pytest

from xrmq.actors import Publisher
from xrmq.actors.runtime import AgentRuntime
from xrmq.schemas import ConversationContextUpdate
from xrmq.topics import context_topic

from buses import broker_process
from recorders import ContextRecorder


async def test_a_publisher_publishes_text_and_messages_in_order_from_plain_code():
    with broker_process() as bus:
        recorder = ContextRecorder("notes")
        runtime = AgentRuntime(bus)
        runtime.register("recorder", recorder)
        async with runtime:

            def sensor() -> list[str]:  # what a script without asyncio does
                with Publisher(bus, name="lab-sensor") as pub:
                    return [
                        pub.publish("notes", "Kettle on.", participant="p1", source="kettle"),
                        pub.publish(
                            context_topic("notes"),
                            ConversationContextUpdate("Kettle off."),
                            participant="p1",
                            source="kettle",
                        ),
                    ]

            ids = await asyncio.to_thread(sensor)
            await recorder.until(2)
    assert len(set(ids)) == 2 and all(ids)
    assert recorder.updates == [
        ("notes", "p1", "kettle", "Kettle on."),
        ("notes", "p1", "kettle", "Kettle off."),
    ]


def test_a_publisher_refuses_bad_content_and_use_outside_its_block(tmp_path):
    pub = Publisher(f"ipc://{tmp_path}/bus")
    with pytest.raises(RuntimeError, match=r"Publisher.publish: start the publisher first"):
        pub.publish("notes", "x", participant="p1")
    with broker_process() as bus:
        with Publisher(bus) as pub:
            with pytest.raises(ValueError, match=r"content: .*text"):
                pub.publish("notes", '{"txt": "x"}', participant="p1")


def test_a_publisher_without_a_broker_times_out_naming_the_bus(tmp_path):
    with pytest.raises(TimeoutError, match=r"no broker answered"):
        Publisher(f"ipc://{tmp_path}/bus", ready_timeout=0.2).start()
