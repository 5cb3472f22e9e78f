"""ResponseOutputs and Reply: one test per rule of docs/interaction.md, against a recording
publisher."""

from __future__ import annotations

import asyncio

import pytest

from xrmq.actors.interaction import Reply, ResponseOutputs
from xrmq.schemas import ResponseOutput
from xrmq.topics import QUERY_TOPIC, VOICE_OUTPUT_TOPIC


class ConsumerClosed(Exception):
    """Stands in for a runtime's "already closed" error."""


class RecordingPublisher:
    """Test double with the publisher protocol; ``failures`` maps call number -> exception."""

    def __init__(self, failures: dict[int, BaseException] | None = None) -> None:
        self.calls: list[tuple[object, ResponseOutput, dict]] = []
        self.attempts = 0
        self.failures = failures or {}

    async def publish(self, topic, message, **kwargs) -> None:
        self.attempts += 1
        failure = self.failures.get(self.attempts)
        if failure is not None:
            raise failure
        self.calls.append((topic, message, kwargs))

    @property
    def messages(self) -> list[ResponseOutput]:
        return [message for _, message, _ in self.calls]


def outputs_for(publisher: RecordingPublisher, **kwargs) -> ResponseOutputs:
    return ResponseOutputs(publisher, VOICE_OUTPUT_TOPIC, **kwargs)


async def wait_forever() -> None:
    await asyncio.Event().wait()


# -- ResponseOutputs ------------------------------------------------------------------


async def test_update_publishes_an_update_for_the_participant_with_the_source():
    publisher = RecordingPublisher()
    await outputs_for(publisher, source="timer").update("p1", "Tea is ready.")
    assert publisher.calls == [
        (
            VOICE_OUTPUT_TOPIC,
            ResponseOutput(kind="update", text="Tea is ready."),
            {"participant_id": "p1", "source": "timer"},
        )
    ]


async def test_update_with_blank_text_publishes_nothing():
    publisher = RecordingPublisher()
    outputs = outputs_for(publisher)
    await outputs.update("p1", "")
    await outputs.update("p1", "  \n\t")
    assert publisher.calls == []


async def test_urgent_update_is_published_urgent_with_its_timestamp():
    publisher = RecordingPublisher()
    await outputs_for(publisher).update("p1", "Pressure high!", urgent=True, timestamp_us=42)
    assert publisher.messages == [
        ResponseOutput(kind="update", text="Pressure high!", urgent=True, timestamp_us=42)
    ]


async def test_withdraw_publishes_an_empty_withdraw_for_the_participant():
    publisher = RecordingPublisher()
    await outputs_for(publisher, source="monitor").withdraw("p2")
    assert publisher.calls == [
        (
            VOICE_OUTPUT_TOPIC,
            ResponseOutput(kind="withdraw"),
            {"participant_id": "p2", "source": "monitor"},
        )
    ]


async def test_source_is_omitted_from_the_publish_call_when_none():
    publisher = RecordingPublisher()
    await outputs_for(publisher).update("p1", "hello")
    assert publisher.calls[0][2] == {"participant_id": "p1"}


def test_response_outputs_rejects_bad_arguments_naming_the_field():
    publisher = RecordingPublisher()
    with pytest.raises(
        ValueError, match=r"ResponseOutputs\.topic: must be a Topic carrying ResponseOutput"
    ):
        ResponseOutputs(publisher, QUERY_TOPIC)
    with pytest.raises(ValueError, match=r"ResponseOutputs\.closed_errors"):
        ResponseOutputs(publisher, VOICE_OUTPUT_TOPIC, closed_errors=(ConsumerClosed, "nope"))
    with pytest.raises(ValueError, match=r"ResponseOutputs\.source"):
        ResponseOutputs(publisher, VOICE_OUTPUT_TOPIC, source="")
    with pytest.raises(ValueError, match=r"ResponseOutputs\.publisher"):
        ResponseOutputs(object(), VOICE_OUTPUT_TOPIC)


async def test_update_and_withdraw_reject_an_empty_participant():
    outputs = outputs_for(RecordingPublisher())
    with pytest.raises(ValueError, match=r"ResponseOutputs\.update\.participant_id"):
        await outputs.update("", "text")
    with pytest.raises(ValueError, match=r"ResponseOutputs\.withdraw\.participant_id"):
        await outputs.withdraw("")


# -- Reply ----------------------------------------------------------------------------


async def test_single_message_reply_is_one_fragment_and_the_empty_terminator():
    publisher = RecordingPublisher()
    reply = outputs_for(publisher, source="router").reply("p1", request_id="turn-1", timestamp_us=7)
    async with reply:
        await reply.send("One moment.")
    fragment, terminator = publisher.messages
    assert fragment == ResponseOutput(
        kind="reply",
        text="One moment.",
        request_id="turn-1",
        response_id=reply.response_id,
        final=False,
        timestamp_us=7,
    )
    assert terminator == ResponseOutput(
        kind="reply",
        text="",
        request_id="turn-1",
        response_id=reply.response_id,
        final=True,
        timestamp_us=7,
    )
    assert all(
        kwargs == {"participant_id": "p1", "source": "router"} for _, _, kwargs in publisher.calls
    )


async def test_every_send_publishes_one_fragment_in_order():
    publisher = RecordingPublisher()
    async with outputs_for(publisher).reply("p1", request_id="t") as reply:
        for chunk in ("The ", "kettle ", "is on."):
            await reply.send(chunk)
        assert [m.text for m in publisher.messages] == ["The ", "kettle ", "is on."]
    assert [m.final for m in publisher.messages] == [False, False, False, True]


async def test_reply_generates_its_own_response_id_for_each_reply():
    publisher = RecordingPublisher()
    outputs = outputs_for(publisher)
    first = outputs.reply("p1", request_id="t")
    second = outputs.reply("p1", request_id="t")
    for reply in (first, second):
        async with reply:
            await reply.send("hi")
    assert first.response_id and second.response_id and first.response_id != second.response_id
    assert {m.response_id for m in publisher.messages} == {first.response_id, second.response_id}


async def test_blank_fragments_before_the_first_published_fragment_are_skipped():
    publisher = RecordingPublisher()
    async with outputs_for(publisher).reply("p1", request_id="t") as reply:
        await reply.send("")
        await reply.send("  \n")
        await reply.send("Hello")
        await reply.send(" ")
    assert [m.text for m in publisher.messages] == ["Hello", " ", ""]


async def test_started_is_awaited_once_before_the_first_published_fragment():
    publisher = RecordingPublisher()
    seen: list[int] = []

    async def started() -> None:
        seen.append(len(publisher.calls))

    async with outputs_for(publisher).reply("p1", request_id="t", started=started) as reply:
        await reply.send("  ")
        assert seen == []
        await reply.send("a")
        await reply.send("b")
    assert seen == [0]


async def test_cancelled_task_never_publishes_even_if_awaited_code_swallowed_the_cancellation():
    publisher = RecordingPublisher()
    in_started = asyncio.Event()

    async def swallowing_started() -> None:
        in_started.set()
        try:
            await wait_forever()
        except asyncio.CancelledError:
            pass

    async def answer() -> None:
        async with outputs_for(publisher).reply(
            "p1", request_id="t", started=swallowing_started
        ) as reply:
            await reply.send("never heard")

    task = asyncio.create_task(answer())
    await in_started.wait()
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert publisher.calls == []


async def test_send_in_a_task_being_cancelled_raises_cancelled_error():
    publisher = RecordingPublisher()
    sent = asyncio.Event()
    outcome: list[str] = []

    async def answer() -> None:
        async with outputs_for(publisher).reply("p1", request_id="t") as reply:
            await reply.send("first")
            sent.set()
            try:
                await wait_forever()
            except asyncio.CancelledError:
                outcome.append("swallowed")
            try:
                await reply.send("second")
            except asyncio.CancelledError:
                outcome.append("send raised")
                raise

    task = asyncio.create_task(answer())
    await sent.wait()
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert outcome == ["swallowed", "send raised"]
    assert [m.text for m in publisher.messages] == ["first", ""]


async def test_terminator_is_published_on_normal_exit():
    publisher = RecordingPublisher()
    reply = outputs_for(publisher).reply("p1", request_id="t")
    async with reply:
        await reply.send("done")
    assert publisher.messages[-1].final and publisher.messages[-1].text == ""
    assert reply.delivered


async def test_terminator_is_published_on_exit_by_exception():
    publisher = RecordingPublisher()
    reply = outputs_for(publisher).reply("p1", request_id="t")
    with pytest.raises(KeyError):
        async with reply:
            await reply.send("partial")
            raise KeyError("model failed")
    assert [(m.text, m.final) for m in publisher.messages] == [("partial", False), ("", True)]
    assert reply.delivered


async def test_terminator_is_published_on_exit_by_cancellation():
    publisher = RecordingPublisher()
    sent = asyncio.Event()
    reply = outputs_for(publisher).reply("p1", request_id="t")

    async def answer() -> None:
        async with reply:
            await reply.send("partial")
            sent.set()
            await wait_forever()

    task = asyncio.create_task(answer())
    await sent.wait()
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert [(m.text, m.final) for m in publisher.messages] == [("partial", False), ("", True)]
    assert reply.delivered


async def test_no_terminator_when_no_fragment_was_published():
    publisher = RecordingPublisher()
    normal = outputs_for(publisher).reply("p1", request_id="t")
    async with normal:
        await normal.send("   ")
    failing = outputs_for(publisher).reply("p1", request_id="t")
    with pytest.raises(RuntimeError):
        async with failing:
            raise RuntimeError("failed before speaking")
    assert publisher.calls == []
    assert not normal.delivered and not failing.delivered


async def test_failed_publish_is_never_retried_or_closed():
    publisher = RecordingPublisher(failures={2: ConnectionError("bus down")})
    reply = outputs_for(publisher).reply("p1", request_id="t")
    with pytest.raises(ConnectionError):
        async with reply:
            await reply.send("one")
            await reply.send("two")
    assert [m.text for m in publisher.messages] == ["one"]
    assert publisher.attempts == 2
    assert not reply.delivered


async def test_send_after_a_failed_publish_raises_runtime_error():
    publisher = RecordingPublisher(failures={1: ConnectionError("bus down")})
    async with outputs_for(publisher).reply("p1", request_id="t") as reply:
        with pytest.raises(ConnectionError):
            await reply.send("one")
        with pytest.raises(RuntimeError, match="earlier publish of this reply failed"):
            await reply.send("two")
    assert publisher.attempts == 1


async def test_closed_errors_from_the_terminator_are_suppressed():
    publisher = RecordingPublisher(failures={2: ConsumerClosed()})
    reply = outputs_for(publisher, closed_errors=(ConsumerClosed,)).reply("p1", request_id="t")
    async with reply:
        await reply.send("bye")
    assert publisher.attempts == 2
    assert not reply.delivered


async def test_closed_errors_from_a_fragment_propagate():
    publisher = RecordingPublisher(failures={1: ConsumerClosed()})
    reply = outputs_for(publisher, closed_errors=(ConsumerClosed,)).reply("p1", request_id="t")
    with pytest.raises(ConsumerClosed):
        async with reply:
            await reply.send("hi")
    assert publisher.attempts == 1


async def test_terminator_errors_not_listed_in_closed_errors_propagate():
    publisher = RecordingPublisher(failures={2: ConnectionError("bus down")})
    reply = outputs_for(publisher, closed_errors=(ConsumerClosed,)).reply("p1", request_id="t")
    with pytest.raises(ConnectionError):
        async with reply:
            await reply.send("hi")
    assert not reply.delivered


async def test_send_after_the_context_exits_raises_runtime_error():
    publisher = RecordingPublisher()
    reply = outputs_for(publisher).reply("p1", request_id="t")
    async with reply:
        await reply.send("hi")
    with pytest.raises(RuntimeError, match="exited"):
        await reply.send("again")
    assert len(publisher.calls) == 2


async def test_send_before_entering_the_context_raises_runtime_error():
    publisher = RecordingPublisher()
    reply = outputs_for(publisher).reply("p1", request_id="t")
    with pytest.raises(RuntimeError, match="async with"):
        await reply.send("hi")
    assert publisher.calls == []


async def test_delivered_is_false_until_the_terminator_is_published():
    publisher = RecordingPublisher()
    reply = outputs_for(publisher).reply("p1", request_id="t")
    async with reply:
        await reply.send("hi")
        assert not reply.delivered
    assert reply.delivered


def test_reply_rejects_bad_arguments_naming_the_field():
    outputs = outputs_for(RecordingPublisher())
    with pytest.raises(ValueError, match=r"Reply\.participant_id"):
        outputs.reply("", request_id="t")
    with pytest.raises(ValueError, match=r"Reply\.request_id"):
        outputs.reply("p1", request_id="")
    with pytest.raises(ValueError, match=r"Reply\.timestamp_us"):
        outputs.reply("p1", request_id="t", timestamp_us=-1)
    with pytest.raises(ValueError, match=r"Reply\.outputs"):
        Reply(object(), "p1", request_id="t")


async def test_a_reply_context_can_be_entered_only_once():
    reply = outputs_for(RecordingPublisher()).reply("p1", request_id="t")
    async with reply:
        pass
    with pytest.raises(RuntimeError, match="entered once"):
        async with reply:
            pass
