"""AgentRouter rules, driven directly (``handle``) with scripted destinations and decisions."""

from __future__ import annotations

import asyncio

import pytest

from xrmq.actors.routing import AgentRouter, RouteResult, RouterTexts, SingleDestination
from xrmq.schemas import Admission, AgentTurn, DestinationResult, RoutingAid
from xrmq.topics import QUERY_TOPIC, VOICE_OUTPUT_TOPIC

from router_doubles import Decisions, Destination, Finishing, Log, router_output


def turn(turn_id: str, text: str = "hello", participant: str = "p1") -> AgentTurn:
    return AgentTurn(participant, turn_id, text, timestamp_us=1_000)


def make_router(log: Log, destinations: list[Destination], *choices, **kwargs) -> AgentRouter:
    return AgentRouter(
        {d.name: d for d in destinations},
        Decisions(log, *choices),
        output=router_output(log),
        **kwargs,
    )


def routed(log: Log) -> list[tuple]:
    """The admissions, answers and router speech, without decisions."""
    return [entry for entry in log if entry[0] in ("admit", "answer", "say", "release", "left")]


# -- serialization ------------------------------------------------------------------------


async def test_a_new_turn_cancels_and_drains_the_previous_answer_before_routing():
    log = Log()
    chat = Destination("chat", log, answers=["hang"])
    router = make_router(log, [chat], "chat", "chat")
    first = asyncio.create_task(router.handle(turn("t1")))
    await chat.answering.wait()
    second = await router.handle(turn("t2"))
    assert await first == RouteResult("t1", "canceled")
    assert second.status == "answered"
    drained = log.index(("drained", "chat", "t1"))
    assert drained < log.index(("decide", "t2", ("chat",)))


async def test_turns_of_other_participants_are_not_cancelled():
    log = Log()
    chat = Destination("chat", log, answers=["hang"])
    router = make_router(log, [chat], "chat", "chat")
    first = asyncio.create_task(router.handle(turn("t1", participant="p1")))
    await chat.answering.wait()
    assert (await router.handle(turn("t2", participant="p2"))).status == "answered"
    assert not first.done()
    await router.stop()
    assert (await first).status == "canceled"


async def test_turns_of_one_participant_run_one_at_a_time_in_order():
    log = Log()
    chat = Destination("chat", log)
    router = make_router(log, [chat], "chat", "chat", "chat")
    results = await asyncio.gather(*(router.handle(turn(f"t{i}")) for i in range(3)))
    # each newer turn cancels the earlier ones, which had not started routing yet
    assert [result.status for result in results] == ["canceled", "canceled", "answered"]
    assert [entry[2] for entry in log.of("answer")] == ["t2"]


async def test_cancelling_the_caller_cancels_its_turn():
    log = Log()
    chat = Destination("chat", log, answers=["hang"])
    router = make_router(log, [chat], "chat")
    caller = asyncio.create_task(router.handle(turn("t1")))
    await chat.answering.wait()
    caller.cancel()
    with pytest.raises(asyncio.CancelledError):
        await caller
    assert ("drained", "chat", "t1") in log


# -- focus --------------------------------------------------------------------------------


async def test_focus_holder_is_tried_first_and_keeps_focus_across_turns():
    log = Log()
    notes = Destination("notes", log, admissions=[Admission("accept", focus=True)])
    chat = Destination("chat", log)
    router = make_router(log, [chat, notes], "notes")
    await router.handle(turn("t1"))
    await router.handle(turn("t2"))
    await router.handle(turn("t3"))
    assert log.of("decide") == [("decide", "t1", ("chat", "notes"))]
    assert log.of("admit") == [
        ("admit", "notes", "t1", False),
        ("admit", "notes", "t2", True),
        ("admit", "notes", "t3", True),
    ]


async def test_declining_does_not_clear_focus():
    log = Log()
    notes = Destination(
        "notes", log, admissions=[Admission("accept", focus=True), Admission("decline")]
    )
    chat = Destination("chat", log)
    router = make_router(log, [chat, notes], "notes", "chat")
    await router.handle(turn("t1"))
    assert (await router.handle(turn("t2"))).route == "chat"
    await router.handle(turn("t3"))
    assert ("admit", "notes", "t3", True) in log
    assert log.of("release") == []


async def test_admission_release_clears_focus_and_routes_the_same_turn_normally():
    log = Log()
    notes = Destination(
        "notes", log, admissions=[Admission("accept", focus=True), Admission("release")]
    )
    chat = Destination("chat", log)
    router = make_router(log, [chat, notes], "notes", "chat", "chat")
    await router.handle(turn("t1"))
    result = await router.handle(turn("t2"))
    assert result == RouteResult("t2", "answered", "chat", "chat answers t2")
    await router.handle(turn("t3"))
    assert ("decide", "t3", ("chat", "notes")) in log  # no focus any more
    assert log.of("release") == []  # the holder released itself


async def test_result_release_gives_up_focus_after_the_answer():
    log = Log()
    notes = Destination(
        "notes",
        log,
        admissions=[Admission("accept", focus=True)],
        answers=[DestinationResult("noted"), DestinationResult("done", focus="release")],
    )
    router = make_router(log, [notes, Destination("chat", log)], "notes", "chat")
    await router.handle(turn("t1"))
    await router.handle(turn("t2"))
    await router.handle(turn("t3"))
    assert ("admit", "notes", "t2", True) in log
    assert ("admit", "chat", "t3", False) in log


async def test_result_take_gives_focus_and_releases_the_previous_holder():
    log = Log()
    notes = Destination("notes", log, admissions=[Admission("accept", focus=True)])
    timer = Destination("timer", log, answers=[DestinationResult("timer set", focus="take")])
    router = make_router(log, [notes, timer], "notes", "timer")
    await router.handle(turn("t1"))
    await router.handle(turn("t2", "set a timer"))  # notes holds focus and accepts
    assert log.of("release") == []
    log.clear()
    notes.admissions.append(Admission("decline"))
    await router.handle(turn("t3", "set a timer"))
    assert log.of("release") == [("release", "notes", "p1")]
    await router.handle(turn("t4"))
    assert ("admit", "timer", "t4", True) in log


async def test_a_focus_holder_that_becomes_ineligible_loses_focus_and_is_released():
    log = Log()
    notes = Destination("notes", log, admissions=[Admission("accept", focus=True)])
    router = make_router(log, [Destination("chat", log), notes], "notes", "chat")
    await router.handle(turn("t1"))
    notes.aid = RoutingAid("notes", eligible=False)
    await router.handle(turn("t2"))
    assert ("release", "notes", "p1") in log
    assert ("decide", "t2", ("chat",)) in log


async def test_participant_departure_drops_focus_and_history():
    log = Log()
    notes = Destination("notes", log, admissions=[Admission("accept", focus=True)])
    chat = Destination("chat", log)
    router = make_router(log, [chat, notes], "notes", "chat")
    await router.handle(turn("t1"))
    await router.participant_left("p1")
    await router.handle(turn("t2"))
    assert ("decide", "t2", ("chat", "notes")) in log
    assert log.of("answer")[-1] == ("answer", "chat", "t2", (), "chat")
    assert log.of("left") == [("left", "chat", "p1"), ("left", "notes", "p1")]


# -- admission ----------------------------------------------------------------------------


async def test_decline_reroutes_once_then_the_eligible_default_answers_without_admission():
    log = Log()
    camera = Destination("camera", log, admissions=[Admission("decline")])
    notes = Destination("notes", log, admissions=[Admission("decline")])
    chat = Destination("chat", log)
    router = make_router(log, [chat, camera, notes], "camera", "notes", "chat", default="chat")
    result = await router.handle(turn("t1"))
    assert result == RouteResult("t1", "answered", "chat", "chat answers t1")
    assert log.of("decide") == [
        ("decide", "t1", ("chat", "camera", "notes")),
        ("decide", "t1", ("chat", "notes")),
    ]
    assert log.of("admit") == [("admit", "camera", "t1", False), ("admit", "notes", "t1", False)]
    assert log.of("answer") == [("answer", "chat", "t1", (), "chat")]


async def test_no_choice_goes_to_the_default():
    log = Log()
    chat = Destination("chat", log)
    router = make_router(log, [chat, Destination("camera", log)], None, default="chat")
    assert (await router.handle(turn("t1"))).route == "chat"
    assert log.of("admit") == []


async def test_without_an_eligible_default_the_router_says_the_decline_text():
    log = Log()
    camera = Destination(
        "camera", log, admissions=[Admission("decline", text="The camera is off.")]
    )
    chat = Destination("chat", log, aid=RoutingAid("chat", eligible=False))
    router = make_router(log, [chat, camera], "camera", default="chat")
    result = await router.handle(turn("t1"))
    assert result == RouteResult(
        "t1",
        "unanswered",
        None,
        "The camera is off.",
        error="NoDestination: camera: declined (The camera is off.); chat: not eligible",
    )
    assert log.of("say") == [("say", None, "t1", "The camera is off.")]


async def test_a_default_that_declined_gets_no_fallback_attempt():
    log = Log()
    chat = Destination("chat", log, admissions=[Admission("decline")])
    router = make_router(
        log, [chat], "chat", default="chat", texts=RouterTexts(unavailable="Nobody can.")
    )
    assert await router.handle(turn("t1")) == RouteResult(
        "t1", "unanswered", None, "Nobody can.", error="NoDestination: chat: declined"
    )
    assert log.of("answer") == []


async def test_clarify_ends_the_turn_with_the_question_said_by_the_router():
    log = Log()
    notes = Destination("notes", log, admissions=[Admission("clarify", text="Which meeting?")])
    router = make_router(log, [notes], "notes")
    result = await router.handle(turn("t1", "When is the meeting?"))
    assert result == RouteResult("t1", "clarified", "notes", "Which meeting?")
    assert log.of("say") == [("say", "notes", "t1", "Which meeting?")]
    assert log.of("answer") == []


async def test_a_failing_admit_counts_as_a_decline():
    log = Log()

    class Broken(Destination):
        async def admit(self, turn, *, focused):
            raise ConnectionError("gone")

    router = make_router(
        log, [Destination("chat", log), Broken("camera", log)], "camera", default="chat"
    )
    assert (await router.handle(turn("t1"))).route == "chat"


async def test_a_choice_that_is_not_a_candidate_goes_to_the_default():
    log = Log()
    router = make_router(log, [Destination("chat", log)], "nonexistent", default="chat")
    assert (await router.handle(turn("t1"))).route == "chat"


# -- router text --------------------------------------------------------------------------


async def test_acknowledgement_is_said_before_the_destination_starts():
    log = Log()
    camera = Destination("camera", log, admissions=[Admission("accept", text="Let me look.")])
    router = make_router(log, [camera], "camera")
    await router.handle(turn("t1"))
    assert log.index(("say", "camera", "t1", "Let me look.")) < log.index(
        ("started", "camera", "t1")
    )


async def test_failure_before_the_first_chunk_is_reported_by_the_router():
    log = Log()
    chat = Destination("chat", log, answers=[ConnectionError("model down")])
    router = make_router(log, [chat], "chat")
    result = await router.handle(turn("t1"))
    assert result.status == "failed" and "model down" in result.error
    assert log.of("say") == [("say", "chat", "t1", RouterTexts().failure)]


async def test_failure_after_the_first_chunk_ends_with_the_routers_apology():
    log = Log()
    chat = Destination("chat", log, answers=[("after", ConnectionError("cut"))])
    router = make_router(log, [chat], "chat")
    assert (await router.handle(turn("t1"))).status == "failed"
    assert log.of("say") == [("say", "chat", "t1", "Sorry, I lost the rest of that answer.")]
    assert log.index(("started", "chat", "t1")) < log.index(log.of("say")[0])


# -- history ------------------------------------------------------------------------------


async def test_history_is_shared_bounded_and_excludes_the_current_turn():
    log = Log()
    chat = Destination("chat", log)
    camera = Destination("camera", log)
    router = make_router(log, [chat, camera], "chat", "camera", "chat", "chat", history_limit=2)
    for turn_id in ("t1", "t2", "t3", "t4"):
        await router.handle(turn(turn_id))
    assert [entry[3] for entry in log.of("answer")] == [(), ("t1",), ("t1", "t2"), ("t2", "t3")]
    assert [entry[1] for entry in log.of("answer")] == ["chat", "camera", "chat", "chat"]


async def test_history_holds_answers_and_clarifications_but_not_failures():
    log = Log()
    chat = Destination(
        "chat",
        log,
        admissions=[Admission("accept"), Admission("clarify", text="Which one?")],
        answers=[DestinationResult("one"), ConnectionError("down"), DestinationResult(None)],
    )
    router = make_router(log, [chat], *["chat"] * 5)
    for turn_id in ("t1", "t2", "t3", "t4", "t5"):
        await router.handle(turn(turn_id))
    # t1 answered, t2 clarified, t3 failed, t4 answered without response context
    assert log.of("answer")[-1][3] == ("t1", "t2")


async def test_history_limit_zero_passes_no_history():
    log = Log()
    chat = Destination("chat", log)
    router = make_router(log, [chat], "chat", "chat", history_limit=0)
    await router.handle(turn("t1"))
    await router.handle(turn("t2"))
    assert log.of("answer")[-1][3] == ()


# -- lifecycle ----------------------------------------------------------------------------


async def test_participant_left_cancels_and_drains_before_telling_destinations():
    log = Log()
    chat = Destination("chat", log, answers=["hang"])
    router = make_router(log, [chat], "chat")
    pending = asyncio.create_task(router.handle(turn("t1")))
    await chat.answering.wait()
    await router.participant_left("p1")
    assert (await pending).status == "canceled"
    assert log.index(("drained", "chat", "t1")) < log.index(("left", "chat", "p1"))


async def test_stop_cancels_and_drains_every_turn_and_refuses_new_ones():
    log = Log()
    chat = Destination("chat", log, answers=["hang", "hang"])
    router = make_router(log, [chat], "chat", "chat")
    first = asyncio.create_task(router.handle(turn("t1", participant="p1")))
    await chat.answering.wait()
    chat.answering.clear()
    second = asyncio.create_task(router.handle(turn("t2", participant="p2")))
    await chat.answering.wait()
    await router.stop()
    assert len(log.of("drained")) == 2
    assert [(await first).status, (await second).status] == ["canceled", "canceled"]
    with pytest.raises(RuntimeError, match="stopped"):
        await router.handle(turn("t3"))


async def test_interrupt_cancels_the_participants_turn():
    log = Log()
    chat = Destination("chat", log, answers=["hang"])
    router = make_router(log, [chat], "chat")
    pending = asyncio.create_task(router.handle(turn("t1")))
    await chat.answering.wait()
    router.interrupt("p1")
    assert (await pending).status == "canceled"


# -- construction -------------------------------------------------------------------------


def test_cleanup_participant_requires_the_query_and_output_topics():
    async def cleanup(pid: str) -> None: ...

    chat = Destination("chat", Log())
    with pytest.raises(
        ValueError, match="cleanup_participant: requires query_topic and output_topic"
    ):
        AgentRouter(
            {"chat": chat},
            SingleDestination(),
            output=router_output(Log()),
            cleanup_participant=cleanup,
        )
    with pytest.raises(ValueError, match="cleanup_participant"):
        AgentRouter(
            {"chat": chat},
            SingleDestination(),
            query_topic=QUERY_TOPIC,
            cleanup_participant=cleanup,
            output=router_output(Log()),
        )
    AgentRouter(
        {"chat": chat},
        SingleDestination(),
        query_topic=QUERY_TOPIC,
        output_topic=VOICE_OUTPUT_TOPIC,
        cleanup_participant=cleanup,
    )


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"agents": {}}, "AgentRouter.agents"),
        ({"agents": {"chat": object()}}, r"AgentRouter.agents\['chat'\]: not a RoutableAgent"),
        ({"decisions": object()}, "AgentRouter.decisions"),
        ({"output": None}, "AgentRouter.output"),
        ({"default": "camera"}, "AgentRouter.default"),
        ({"history_limit": -1}, "AgentRouter.history_limit"),
        ({"query_topic": VOICE_OUTPUT_TOPIC}, "AgentRouter.query_topic"),
        ({"output_topic": QUERY_TOPIC}, "AgentRouter.output_topic"),
    ],
)
def test_constructor_rejects_invalid_arguments_naming_the_field(kwargs, message):
    arguments = {
        "agents": {"chat": Destination("chat", Log())},
        "decisions": SingleDestination(),
        "output": router_output(Log()),
        **kwargs,
    }
    with pytest.raises(ValueError, match=message):
        AgentRouter(arguments.pop("agents"), arguments.pop("decisions"), **arguments)


async def test_stop_lets_a_turn_in_flight_finish_within_the_grace_and_refuses_new_ones():
    chat = Finishing()
    router = AgentRouter(
        {"chat": chat}, SingleDestination(), output=router_output(Log()), shutdown_grace_s=30
    )
    pending = router.submit(AgentTurn("p1", "t1", "tell me"))
    await chat.answering.wait()
    stopping = asyncio.create_task(router.stop())
    await asyncio.sleep(0)
    assert not stopping.done()  # it waits for the answer, it does not cancel it
    with pytest.raises(RuntimeError, match="stopped"):
        router.submit(AgentTurn("p1", "t2", "more"))
    chat.finish.set()
    await stopping
    assert (await pending) == RouteResult("t1", "answered", "chat", "all of it")


async def test_stop_cancels_what_is_still_running_after_the_grace():
    log = Log()
    chat = Destination("chat", log, answers=["hang"])
    router = AgentRouter(
        {"chat": chat}, SingleDestination(), output=router_output(log), shutdown_grace_s=0.05
    )
    pending = router.submit(AgentTurn("p1", "t1", "tell me"))
    await chat.answering.wait()
    await router.stop()
    assert pending.cancelled() and ("drained", "chat", "t1") in log
    with pytest.raises(ValueError, match="shutdown_grace_s: must be >= 0"):
        AgentRouter(
            {"chat": chat}, SingleDestination(), output=router_output(log), shutdown_grace_s=-1
        )
